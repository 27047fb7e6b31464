-- The fixed window (src/window/fixed.rs): at most `limit` admissions per window of `window`
-- microseconds, windows aligned to the Unix epoch.
--
-- State: one hash {i = window index, c = admissions in it, w = window, n = limit}, written by an
-- admission, expiring when the window ends (rounded up to the millisecond).
--
-- ARGV: mode (take | peek), n, limit, window (us), client time (tests only; '' for TIME).
-- Reply: {admitted 1 | denied 0, now_us, level, 1, reset, wait, 0, next}, spans in
-- microseconds. next, the wait until one more is free, is the window's end (reset): nothing
-- comes back before it, and all of it then (0 for a window nothing was taken in).

local MAXD = 4503599627370496

local mode = ARGV[1]
local n, limit, window = whole(ARGV[2]), whole(ARGV[3]), whole(ARGV[4])
if (mode ~= 'take' and mode ~= 'peek') or not n or not limit or not window or limit < 1
    or n > limit or limit > MAXD or window < 1 or window > MAXD then
  return bad('arguments')
end
local now = reading(5)
if not now then return bad('reading') end

-- Microseconds from now to the end of window `index` of length w (index at least now's
-- window), exact below 2^53 and clamped there.
local function until_end(index, w)
  return span(index - div(now, w), w, w - now % w)
end

local j = div(now, window)
local index, count = j, 0
local stored = redis.call('HMGET', KEYS[1], 'i', 'c', 'w', 'n')
if stored[1] or stored[2] or stored[3] or stored[4] then
  local i0, c0, w0, n0 = whole(stored[1]), whole(stored[2]), whole(stored[3]), whole(stored[4])
  -- (A window starting at 2^53 us or later is no window this script wrote.)
  if not i0 or not c0 or not w0 or not n0 or w0 < 1 or w0 > MAXD or n0 > MAXD or c0 > n0
      or i0 > div(LIMIT - 1, w0) then
    return foreign()
  end
  if w0 == window and n0 == limit then
    -- A reading older than the state's window counts in that window (it never resets a count).
    if i0 >= j then
      index, count = i0, c0
    end
  elseif i0 >= div(now, w0) then
    -- Written under another quota, in a window that has not ended: its admissions count in full
    -- in this reading's window, and so do the places the old limit did not have, so that neither
    -- quota's remaining is exceeded.
    count = math.min(limit, c0 + math.max(0, limit - n0))
  end
end

local reset = until_end(index, window)
if n == 0 then
  if count == 0 then reset = 0 end
  return { 1, now, limit - count, 1, reset, 0, 0, reset }
end
if count + n > limit then
  -- It fits at the next window's start, since n <= limit.
  return { 0, now, limit - count, 1, reset, reset, 0, reset }
end
if mode == 'take' then
  redis.call('HSET', KEYS[1], 'i', string.format('%d', index), 'c', string.format('%d', count + n),
    'w', string.format('%d', window), 'n', string.format('%d', limit))
  -- Until the window ends, even past 2^53 us (where the reply's reset is clamped).
  expire(ms_in((index - j) * window, window - now % window, 0, 1000))
end
return { 1, now, limit - count - n, 1, reset, 0, 0, reset }
