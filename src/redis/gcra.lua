-- The GCRA, shared by the token bucket and the leaky meter (src/gcra.rs is the in-process twin).
--
-- State: one string "base gap interval capacity tick", written by an admission. The theoretical
-- arrival time tat (the instant the bucket is full again, the meter's queue empty) is `gap` ticks
-- of `tick` nanoseconds (1 or 1000) after `base`, the admission's reading in Unix microseconds.
-- gap is at most the burst window (at most 2^52 ticks), so no sum here passes 2^53 for any
-- reading below 2^53 us. interval (I, in ticks) and capacity (C, in tokens) are the quota the
-- state was written under.
--
-- ARGV: mode, n, interval, capacity, tick, client time (tests only; '' for the server's TIME).
-- Modes: take (bucket), peek (bucket, writes nothing), strict (meter: admit only on an empty
-- queue), speek (strict, writes nothing), schedule (meter: a place in the queue). n = 0 is a
-- query (writes nothing).
-- Reply: {admitted 1 | denied 0, now_us, level, unit, reset, wait, backlog}, spans in ticks.

-- The client keeps every burst window B = C x I at or below MAXD = 2^52 ticks, so a gap that
-- conforms (d + cost <= B) is below 2^53. The span d until tat is exact up to 2^53 ticks (a
-- reading up to 2^53 - B before the state's) and clamped there; waits are computed as
-- d - (B - cost), never as a sum past 2^53.
local MAXD = 4503599627370496
local LIMIT = 9007199254740992

local function gcra(modes)
  local mode = ARGV[1]
  local n, interval, capacity, tick = whole(ARGV[2]), whole(ARGV[3]), whole(ARGV[4]), whole(ARGV[5])
  if not modes[mode] or not n or not interval or not capacity or not tick or interval < 1
      or capacity < 1 or n > capacity or (tick ~= 1 and tick ~= 1000)
      or capacity * interval > MAXD then
    return bad('arguments')
  end
  local now = reading(6)
  if not now then return bad('reading') end
  local burst = capacity * interval

  -- Ticks (of tk ns) from now until tat = base + off ticks of st ns, clamped to [0, LIMIT]. In
  -- microsecond ticks a nanosecond remainder counts as a whole tick: never more tokens than the
  -- state holds.
  local function until_tat(base, off, st, tk)
    local d
    if tk == 1 then
      if st == 1 then
        d = (base - now) * 1000 + off
      else
        d = (base - now + off) * 1000
      end
    elseif st == 1 then
      d = base - now + div_up(off, 1000)
    else
      d = base - now + off
    end
    if d < 0 then return 0 end
    if d > LIMIT then return LIMIT end
    return d
  end

  -- A span of x ticks of `from` ns in ticks of `to` ns, rounded up.
  local function convert(x, from, to)
    if from == to then return x end
    if from == 1 then return div_up(x, 1000) end
    return math.min(x * 1000, LIMIT)
  end

  -- d: ticks until tat under this call's quota. The quota the state was written under, when it
  -- differs, must admit too (old_*): a key never has more remaining than either quota allows,
  -- until its state is fresh.
  local d = 0
  local old = nil
  local raw = redis.call('GET', KEYS[1])
  if raw then
    local a, b, c, e, f = string.match(raw, '^(%d+) (%d+) (%d+) (%d+) (%d+)$')
    if not a then return foreign() end
    local base, off, i0, c0, tk0 = tonumber(a), tonumber(b), tonumber(c), tonumber(e), tonumber(f)
    if base >= 9007199254740992 or off > MAXD or i0 < 1 or c0 < 1 or (tk0 ~= 1 and tk0 ~= 1000)
        or c0 * i0 > MAXD then
      return foreign()
    end
    d = until_tat(base, off, tk0, tick)
    if (i0 ~= interval or c0 ~= capacity or tk0 ~= tick) then
      local d0 = until_tat(base, off, tk0, tk0)
      if d0 > 0 then
        old = { d = d0, interval = i0, capacity = c0, burst = c0 * i0, tick = tk0 }
      end
    end
  end

  -- Whole tokens the old quota leaves after taking k (nil: no old quota in force).
  local function old_remaining(k)
    if not old then return nil end
    if k > old.capacity or old.d > old.burst - k * old.interval then return 0 end
    return div(old.burst - old.d - k * old.interval, old.interval)
  end

  -- The level (in ticks) capped to what the old quota leaves after taking k.
  local function level_after(level, k)
    local r = old_remaining(k)
    if r ~= nil and r < div(level, interval) then
      return r * interval
    end
    return level
  end

  -- Ticks until the old quota admits k: 0 when it does or is not in force.
  local function old_wait(k)
    if not old then return 0 end
    local w
    if k > old.capacity then
      w = old.d
    else
      w = old.d - (old.burst - k * old.interval)
      if w < 0 then w = 0 end
    end
    return convert(w, old.tick, tick)
  end

  local function denied(wait)
    local level = burst - d
    if level < 0 then level = 0 end
    return { 0, now, level_after(level, 0), interval, d, wait, d }
  end

  -- Writes tat = now + gap ticks, to expire when the state reads as fresh (tat), rounded up to
  -- the millisecond: a key that expired early would hand out a second burst.
  local function write(gap)
    local ms = div_up(gap, 1000000 / tick)
    redis.call('SET', KEYS[1], string.format('%d %d %d %d %d', now, gap, interval, capacity, tick))
    expire(ms)
  end

  if n == 0 then
    local level = burst - d
    if level < 0 then level = 0 end
    -- A query: what is there (for the meter: the queue, and the delay a request would get).
    return { 1, now, level_after(level, 0), interval, d, d, d }
  end

  local cost = n * interval
  if mode == 'strict' or mode == 'speek' then
    -- The meter's strict admission: only on an empty queue, whatever the quota.
    if d > 0 then return denied(d) end
    if mode == 'strict' then write(cost) end
    return { 1, now, level_after(burst - cost, n), interval, cost, 0, cost }
  end

  -- The conformance test: the gap the request leaves, d + cost, must fit the burst window, under
  -- both quotas.
  local wait = d - (burst - cost)
  if wait < 0 then wait = 0 end
  wait = math.max(wait, old_wait(n))
  if wait > 0 then return denied(wait) end
  local gap = d + cost
  if mode ~= 'peek' then write(gap) end
  return { 1, now, level_after(burst - gap, n), interval, gap, d, gap }
end
