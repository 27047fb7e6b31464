-- tollgate: what every script shares. Each script is this prelude, then its algorithm's file.
-- Errors a script raises itself have the code TOLLGATE ("TOLLGATE foreign value: ...",
-- "TOLLGATE bad arguments"), which the client tells apart from the server's own.
--
-- Every number here is an integer below 2^53, so Lua's doubles hold it exactly: times are Unix
-- microseconds (exact until the year 2255) and spans are bounded by the client (see mod.rs).
-- Nothing is ever turned into a string with tostring (it would print 1.7961303480597e+15):
-- state is written with string.format('%d'), and replies are integers.

-- The whole number in `s` (decimal digits only), or nil when it is not one below 2^53: an
-- argument the client did not build, or a stored value no script wrote (no script writes a number
-- that large, and one past 2^53 would be read rounded). HMGET answers false for a missing field:
-- anything but a string is refused too.
local function whole(s)
  if type(s) ~= 'string' or not string.match(s, '^%d+$') then return nil end
  local x = tonumber(s)
  if x >= 9007199254740992 then return nil end
  return x
end

-- Whether the reading came from the client (tests only). A TTL counts on the server's clock, so
-- one computed from a client's reading would mean nothing: such state is kept without a TTL.
local client_time = false

-- The reading, in Unix microseconds: the server's TIME, or the client's (tests only), ARGV[idx];
-- nil when it is not a whole number below 2^53.
local function reading(idx)
  local given = ARGV[idx]
  local now
  if given ~= nil and given ~= '' then
    now = whole(given)
    client_time = true
  else
    local t = redis.call('TIME')
    now = tonumber(t[1]) * 1000000 + tonumber(t[2])
  end
  if now == nil or now >= 9007199254740992 then
    return nil
  end
  return now
end

-- floor(a / b) for integers 0 <= a < 2^53, b >= 1: exact (the quotient's rounding error is below 1/b).
local function div(a, b)
  return math.floor(a / b)
end

-- ceil(a / b) for integers 0 <= a, a + b < 2^53, b >= 1.
local function div_up(a, b)
  return math.floor((a + b - 1) / b)
end

local function foreign()
  return redis.error_reply('TOLLGATE foreign value: the key holds a value this script did not write')
end

-- The largest span a reply carries: 2^53 (a span that long is clamped to it).
local LIMIT = 9007199254740992

-- a x w + b, exactly, for whole a, w, b >= 0 with w, b below 2^53; clamped to LIMIT.
local function span(a, w, b)
  if a > div(LIMIT - b, w) then return LIMIT end
  return a * w + b
end

-- Milliseconds in a + b microseconds plus c ticks of `tick` ns (1 or 1000), rounded up: exact for
-- a below 2^53 and b, c at most 2^52, with no sum past 2^53. The TTL of a state that reads as
-- fresh only after a span longer than a reply carries (after a reading far before the state's).
local function ms_in(a, b, c, tick)
  local per_us = 1000 / tick
  return div(a, 1000) + div(b, 1000) + div_up((a % 1000 + b % 1000) * per_us + c, 1000 * per_us)
end

local function bad(what)
  return redis.error_reply('TOLLGATE bad ' .. what)
end

-- Sets the expiry of KEYS[1] to `ms` milliseconds (at least 1), unless the reading was the
-- client's.
local function expire(ms)
  if client_time then
    redis.call('PERSIST', KEYS[1])
  else
    redis.call('PEXPIRE', KEYS[1], math.max(ms, 1))
  end
end

-- Writes the string `value` at `key`, expiring in `ms` milliseconds (at least 1) unless the
-- reading was the client's: one command.
local function set_expiring_key(key, value, ms)
  if client_time then
    redis.call('SET', key, value)
  else
    redis.call('SET', key, value, 'PX', math.max(ms, 1))
  end
end

-- set_expiring_key at KEYS[1].
local function set_expiring(value, ms)
  set_expiring_key(KEYS[1], value, ms)
end
