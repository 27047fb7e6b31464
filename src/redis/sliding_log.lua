-- The sliding window log (src/window/sliding_log.rs): exact, never more than N admissions in
-- any window (t - W, t].
--
-- State: one sorted set of admissions scored by their effective time in Unix microseconds, each
-- a unique member "time:sequence" (admissions of one time are numbered after those already
-- there), and the quota it was written under as the member "quota:W:N" scored -inf. An admission
-- prunes the entries that have left the window (never the newest, which is the admission
-- itself) and sets a TTL until its own entries leave; denials and peeks write nothing.
--
-- Under another quota than the state's, while the state's window still holds entries, a request
-- must fit both, and the admission that converts the state records, beside its own entries, one
-- for each place the old quota did not have (so the key keeps no more than both allowed).
--
-- ARGV: mode (take | peek), n, limit, window (us), client time (tests only; '' for TIME).
-- Reply: {admitted 1 | denied 0, now_us, level, 1, reset, wait, 0, next}, spans in
-- microseconds; next: until one more admission is free (the oldest entry in the window leaving;
-- under two quotas, until both have one more), 0 when the window holds none.

local mode = ARGV[1]
local n, limit, window = whole(ARGV[2]), whole(ARGV[3]), whole(ARGV[4])
if (mode ~= 'take' and mode ~= 'peek') or not n or not limit or not window or limit < 1
    or n > limit or window < 1 or window > 4503599627370496 then
  return bad('arguments')
end
local now = reading(5)
if not now then return bad('reading') end

local key = KEYS[1]
local quota = string.format('quota:%d:%d', window, limit)
local old_window, old_limit
local lowest = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
if lowest[1] then
  if lowest[2] ~= '-inf' then return foreign() end
  local w0, n0 = string.match(lowest[1], '^quota:(%d+):(%d+)$')
  w0, n0 = whole(w0), whole(n0)
  -- A quota this script accepts: a window of 1 us to 2^52 us, a limit of at least 1.
  if not w0 or not n0 or w0 < 1 or w0 > 4503599627370496 or n0 < 1 then return foreign() end
  if lowest[1] ~= quota then
    old_window, old_limit = w0, n0
  end
end

-- The newest entry's time (the quota member alone is no entry).
local newest
local top = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
if top[1] and top[2] ~= '-inf' then
  newest = tonumber(top[2])
  -- Whole microseconds below 2^53, as every time here (+inf or 1e19 would be no time at all).
  if not newest or newest ~= math.floor(newest) or newest < 0 or newest >= LIMIT then
    return foreign()
  end
end

-- The effective time: a reading older than the newest entry is judged at that entry's time.
local at = now
if newest and newest > at then at = newest end

-- Entries still in the window of length w at `at`.
local function in_window(w)
  if at < w then
    return redis.call('ZCOUNT', key, 0, '+inf')
  end
  return redis.call('ZCOUNT', key, '(' .. string.format('%d', at - w), '+inf')
end

-- t + w - now, exact below 2^53 and clamped there (t + w may pass it near the end of Lua's exact
-- range, and so may w + (t - now) after a reading far before the newest entry).
local function after(t, w)
  if t >= now then return span(1, w, t - now) end
  return w - (now - t)
end

local reset = 0
if newest and after(newest, window) > 0 then reset = after(newest, window) end

local count = in_window(window)
local left = limit - count
if left < 0 then left = 0 end
-- Under the quota the state was written with, while its window still holds entries.
local old_count
if old_window and newest and after(newest, old_window) > at - now then
  old_count = in_window(old_window)
  if old_limit - old_count < left then
    left = math.max(old_limit - old_count, 0)
  end
end

-- Microseconds until k more fit a window of w holding c entries under limit lim: until the
-- (lim - k + 1)-th newest entry leaves it (0 when they fit now).
local function retry(w, lim, c, k)
  if c + k <= lim then return 0 end
  if k > lim then
    -- Never under that limit: once its window is empty.
    return after(newest, w)
  end
  local e = redis.call('ZREVRANGE', key, lim - k, lim - k, 'WITHSCORES')
  return after(tonumber(e[2]), w)
end

-- Microseconds until k more fit under both quotas (the old one while its window holds entries).
local function wait_for(k)
  local w = retry(window, limit, count, k)
  if old_count then
    w = math.max(w, retry(old_window, old_limit, old_count, k))
  end
  return w
end

-- Microseconds until `left` is one more, if nothing is admitted: until one more than it fits.
local function next_of()
  if left >= limit then return 0 end
  return math.max(wait_for(left + 1), 1)
end

if n == 0 then
  return { 1, now, left, 1, reset, 0, 0, next_of() }
end

local wait = wait_for(n)
if wait > 0 then
  return { 0, now, left, 1, reset, wait, 0, next_of() }
end

-- Once admitted, the oldest entry in the window (the count-th newest, read before anything is
-- written) is the first to leave; with none, the admission's own, at `at`. Under another quota,
-- the admission converts the key to this one: the entries it records for the places the old
-- quota did not have leave with its own, so the oldest in the window still decides.
local next = after(at, window)
if count > 0 then
  local e = redis.call('ZREVRANGE', key, count - 1, count - 1, 'WITHSCORES')
  next = after(tonumber(e[2]), window)
end

if mode == 'take' then
  -- Entries that left the window at `at` can never count again (`at` never decreases).
  redis.call('ZREMRANGEBYSCORE', key, '(-inf', string.format('%d', at - window))
  if old_window or not lowest[1] then
    if lowest[1] then redis.call('ZREM', key, lowest[1]) end
    redis.call('ZADD', key, '-inf', quota)
  end
  -- Converting from another quota: the places the old one did not have are recorded as
  -- admissions at `at`, so that from now on, under this quota alone, the key has no more left
  -- than both allowed at this admission.
  local entries = n
  if old_count then
    entries = n + math.max(0, (limit - count) - (old_limit - old_count))
  end
  local seq = redis.call('ZCOUNT', key, at, at)
  local stamp = string.format('%d', at)
  local batch = {}
  for k = 1, entries do
    batch[#batch + 1] = stamp
    batch[#batch + 1] = stamp .. ':' .. string.format('%d', seq + k)
    if #batch >= 1000 or k == entries then
      redis.call('ZADD', key, unpack(batch))
      batch = {}
    end
  end
  -- Until the newest entry leaves the window, even when that is more than 2^53 us away (which
  -- the reply's reset is clamped to).
  expire(ms_in(at - now, window, 0, 1000))
end
return { 1, now, left - n, 1, after(at, window), 0, 0, next }
