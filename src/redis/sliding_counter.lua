-- The sliding window counter (src/window/sliding_counter.rs, one window): admits n at e
-- microseconds into window j when prev x (W - e) + (cur + n) x W <= N x W, prev and cur being
-- the counts of windows j - 1 and j; windows aligned to the Unix epoch.
--
-- State: one hash {i = window index, p = count of window i - 1, c = count of window i,
-- w = window (us), n = limit}, written by an admission, expiring when both windows have left.
--
-- ARGV: mode (take | peek), n, limit, window (us), client time (tests only; '' for TIME).
-- Reply: {admitted 1 | denied 0, now_us, level, unit, reset, wait, 0, next}, spans in
-- microseconds; remaining = level / unit, and next the wait until it is one higher (0: nothing
-- counts). The client keeps N x W below 2^52, so the comparison (and twice a
-- window) is exact.

local mode = ARGV[1]
local n, limit, window = whole(ARGV[2]), whole(ARGV[3]), whole(ARGV[4])
if (mode ~= 'take' and mode ~= 'peek') or not n or not limit or not window or limit < 1
    or n > limit or window < 1 or limit * window >= 4503599627370496 then
  return bad('arguments')
end
local now = reading(5)
if not now then return bad('reading') end

local j, e = div(now, window), now % window
-- i: the window the state belongs to; oldest: the weighted count; cur: the current window's.
local i, oldest, cur = j, 0, 0
local stored = redis.call('HMGET', KEYS[1], 'i', 'p', 'c', 'w', 'n')
if stored[1] or stored[2] or stored[3] or stored[4] or stored[5] then
  local i0, p0, c0 = whole(stored[1]), whole(stored[2]), whole(stored[3])
  local w0, n0 = whole(stored[4]), whole(stored[5])
  -- (A window starting at 2^53 us or later is no window this script wrote.)
  if not i0 or not p0 or not c0 or not w0 or not n0 or w0 < 1 or p0 > n0 or c0 > n0
      or i0 > div(LIMIT - 1, w0) then
    return foreign()
  end
  if w0 == window and n0 == limit then
    i, oldest, cur = i0, p0, c0
  elseif i0 + 2 > div(now, w0) then
    -- Written under another quota, and still counting: all of it counts in full in this
    -- window, with the places the old limit did not have, so neither quota's remaining is
    -- exceeded.
    cur = math.min(limit, p0 + c0 + math.max(0, limit - n0))
  end
end

-- A reading before the state's window is judged at that window's start (e = 0), measuring
-- spans from the reading (lead).
local at, lead = j, 0
if j < i then
  at, lead, e = i, span(i - j - 1, window, window - e), 0
end
if at == i + 1 then
  oldest, cur = cur, 0
elseif at > i + 1 then
  oldest, cur = 0, 0
end

-- N - estimate after taking k, as level / unit.
local function level_of(k)
  if oldest == 0 then return limit - cur - k, 1 end
  local room = limit * window - (oldest * (window - e) + (cur + k) * window)
  if room < 0 then room = 0 end
  return room, window
end

-- lead + a x window + b - e, clamped to 2^53 (a span that long only follows a clock stepping
-- back by more than 2^53 - 2 windows).
local function from_reading(a, b)
  local x = span(a, window, b)
  if x >= LIMIT - lead then return LIMIT end
  return lead + x - e
end

-- Microseconds until the estimate reaches 0: until the latest window with a count leaves.
local function reset_of(k)
  if cur + k > 0 then return from_reading(2, 0) end
  if oldest > 0 then return from_reading(1, 0) end
  return 0
end

-- The earliest elapsed time >= from, in a window whose weighted count is o and full count f, at
-- which k more fit; nil when none does.
local function earliest(o, f, from, k)
  local room = limit - f - k
  if room < 0 then return nil end
  if o == 0 then return from end
  local at_e = math.max(window - div(room * window, o), from)
  if at_e < window then return at_e end
  return nil
end

-- Microseconds until k (1..N) more fit, the current window holding c: in this window, as the
-- weighted count fades, or in the next, as the current one does, or once both have left.
local function wait_for(k, c)
  local first = earliest(oldest, c, e, k)
  if first then return from_reading(0, first) end
  local second = earliest(c, 0, 0, k)
  if second then return from_reading(1, second) end
  return from_reading(2, 0)
end

-- Microseconds until the whole admissions left, level / unit with the current window holding c,
-- are one more: until one more than that would fit. 0 when nothing counts.
local function next_of(level, unit, c)
  local m = div(level, unit)
  if m >= limit then return 0 end
  return math.max(wait_for(m + 1, c), 1)
end

if n == 0 or oldest * (window - e) + (cur + n) * window <= limit * window then
  local level, unit = level_of(n)
  local reset = reset_of(n)
  if n > 0 and mode == 'take' then
    redis.call('HSET', KEYS[1], 'i', string.format('%d', at), 'p', string.format('%d', oldest),
      'c', string.format('%d', cur + n), 'w', string.format('%d', window),
      'n', string.format('%d', limit))
    -- Fresh once window at + 1 has ended, even past 2^53 us (where the reply's reset is
    -- clamped). at x window is below 2^53: at is j or the state's window.
    expire(ms_in((at - j) * window, window, window - now % window, 1000))
  end
  return { 1, now, level, unit, reset, 0, 0, next_of(level, unit, cur + n) }
end

local level, unit = level_of(0)
return { 0, now, level, unit, reset_of(0), wait_for(n, cur), 0, next_of(level, unit, cur) }
