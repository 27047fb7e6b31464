-- The GCRA, shared by the token bucket and the leaky meter (src/gcra.rs is the in-process twin).
-- The algorithm's own file comes first and sets KIND ('bucket' or 'meter'); a main file follows
-- (gcra_one.lua: one key; gcra_all.lua: several limits on one key, all or none).
--
-- State: one string "base gap interval capacity tick", written by an admission. The theoretical
-- arrival time tat (the instant the bucket is full again, the meter's queue empty) is `gap` ticks
-- of `tick` nanoseconds (1 or 1000) after `base`, the admission's reading in Unix microseconds
-- (or, after tokens given back at a reading more than 2^52 ticks before tat, an earlier base of
-- the same state: see the lease).
-- gap is at most 2^52 ticks: the burst window (at most 2^52 ticks) for an admission, and at most
-- MAXD for a reservation into debt, which the script grants only while the gap it writes stays
-- within it. So no sum here passes 2^53 for any reading below 2^53 us. interval (I, in ticks) and
-- capacity (C, in tokens) are the quota the state was written under.
--
-- gcra(key, mode, n, interval, capacity, tick, now, x1, x2, x3) decides one key and returns its
-- reply and the write it asks for (nil for none: a denial, a peek, a query), as
-- {base, gap, ttl_ms}; the main file makes the writes. Modes: take (bucket), peek (bucket,
-- writes nothing), lease (bucket: up to n whole tokens, after giving back x1 unspent ones),
-- reserve (bucket: n tokens now, into debt when the wait for them is at most x1 ticks), cancel
-- (bucket: gives back up to n tokens of the reservation that wrote the gap x2 at the reading x1
-- and is ready x3 ticks after it, less those taken after it), strict (meter: admit only on an
-- empty queue), speek (strict, writes nothing), schedule (meter: a place in the queue). n = 0 is
-- a query (writes nothing).
-- Reply: {admitted 1 | denied 0, now_us, level, unit, reset, wait, backlog, next}, spans in
-- ticks; a lease answers the tokens it took in place of the backlog, a reservation the ticks
-- until its tokens are there in place of the wait, a cancel the tokens it gave back in place of
-- the backlog. next: the ticks until the whole tokens (free places) reported grow by one if
-- nothing else is taken, 0 when all are there.
--
-- The client keeps every burst window B = C x I at or below MAXD = 2^52 ticks, so a gap that
-- conforms (d + cost <= B) is below 2^53. The span d until tat is exact up to 2^53 ticks (a
-- reading up to 2^53 - B before the state's) and clamped there; waits are computed as
-- d - (B - cost), never as a sum past 2^53. The code is straight-line on purpose: every closure
-- a call creates is garbage the server's collector then pays for.

local MAXD = 4503599627370496

local function gcra(key, mode, n, interval, capacity, tick, now, x1, x2, x3)
local known
if KIND == 'bucket' then
  known = mode == 'take' or mode == 'peek' or mode == 'lease' or mode == 'reserve'
    or mode == 'cancel'
else
  known = mode == 'strict' or mode == 'speek' or mode == 'schedule'
end
if not known or not n or not interval or not capacity or not tick or interval < 1
    or capacity < 1 or n > capacity or (tick ~= 1 and tick ~= 1000)
    or capacity * interval > MAXD then
  return bad('arguments')
end
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

-- d: ticks until tat under this call's quota. When the state was written under another quota
-- that is still in force (its state not yet full), a key has no more than either quota leaves:
-- `conv`, the span d converted, holds at most the old quota's whole tokens; a request must
-- conform under both; and an admission writes the converted state, under this call's quota.
local d = 0
local base, off
local old_d, old_interval, old_capacity, old_burst, old_tick
local raw = redis.call('GET', key)
if raw then
  local a, b, c, e, f = string.match(raw, '^(%d+) (%d+) (%d+) (%d+) (%d+)$')
  if not a then return foreign() end
  local i0, c0, tk0
  base, off, i0, c0, tk0 = tonumber(a), tonumber(b), tonumber(c), tonumber(e), tonumber(f)
  if base >= LIMIT or off > MAXD or i0 < 1 or c0 < 1 or (tk0 ~= 1 and tk0 ~= 1000)
      or c0 * i0 > MAXD then
    return foreign()
  end
  d = until_tat(base, off, tk0, tick)
  if i0 ~= interval or c0 ~= capacity or tk0 ~= tick then
    local d0 = until_tat(base, off, tk0, tk0)
    if d0 > 0 then
      old_d, old_interval, old_capacity, old_burst, old_tick = d0, i0, c0, c0 * i0, tk0
    end
  end
end
local conv = d
if old_d then
  -- The old quota's whole tokens now, as a span under this call's quota.
  local r = 0
  if old_d <= old_burst then r = div(old_burst - old_d, old_interval) end
  if r <= div(burst, interval) and burst - r * interval > conv then
    conv = burst - r * interval
  end
end

-- Ticks until the quota the state was written under admits k (0 when it does or is not in
-- force), in this call's ticks, rounded up.
local function old_wait(k)
  if not old_d then return 0 end
  local w = old_d
  if k <= old_capacity then
    w = old_d - (old_burst - k * old_interval)
    if w < 0 then w = 0 end
  end
  if old_tick == 1 and tick ~= 1 then
    w = div_up(w, 1000)
  elseif old_tick ~= 1 and tick == 1 then
    w = math.min(w * 1000, LIMIT)
  end
  return w
end

local level = burst - conv
if level < 0 then level = 0 end

-- Ticks until the whole tokens in `lvl` grow by one, for a state `dd` ticks from full under this
-- call's quota and, with `old`, the quota it was written under while that is in force (a key
-- has no more than either leaves, so both must have one more); 0 when all are there.
local function next_of(lvl, dd, old)
  local m = div(lvl, interval)
  if m >= capacity then return 0 end
  -- dd <= LIMIT and burst - (m + 1) x interval >= 0: no sum past 2^53.
  local w = dd - (burst - (m + 1) * interval)
  if old then w = math.max(w, old_wait(m + 1)) end
  return math.max(w, 1)
end

-- The write of tat = now + gap ticks, expiring when the state reads as fresh (tat), rounded up
-- to the millisecond: a key that expired early would hand out a second burst. A state given back
-- to full is still written (full as of now, as in process: a reading before now sees it short).
local function write(gap)
  return { now, gap, div_up(gap, 1000000 / tick) }
end

if mode == 'lease' then
  -- Gives back `back` unspent tokens as TokenBucket::refund does (tat moves back by that many
  -- intervals, never before now; only under the quota the state was written with), then takes
  -- as many whole tokens as are there, up to n (n = 0: only gives back).
  local back = whole(x1)
  if not back or back > capacity then return bad('arguments') end
  local moved = false
  if back > 0 and conv > 0 and not old_d then
    -- (Here the state was written under this call's quota, so its ticks are this call's.)
    if d >= LIMIT or d - back * interval > MAXD then
      -- A reading more than 2^52 ticks before tat (a clock stepped back): d may be clamped, and
      -- the gap from now would be one no state may hold. The tokens go back relative to the
      -- state's own base instead, exactly; there is still nothing to take.
      local b, o = base, off - back * interval
      if o < 0 then
        if tick == 1 then
          local us = div_up(-o, 1000)
          b, o = base - us, o + us * 1000
        else
          b, o = base + o, 0
        end
      end
      -- tat = b + o ticks, b after now (tat is more than 2^52 ticks after now): the TTL is the
      -- time until then, rounded up to the millisecond.
      local w = { b, o, ms_in(b - now, 0, o, tick) }
      d = until_tat(b, o, tick, tick)
      if n == 0 then return { 1, now, 0, interval, d, 0, 0, next_of(0, d, false) }, w end
      local wt = math.max(d - (burst - interval), 1)
      return { 0, now, 0, interval, d, wt, 0, next_of(0, d, false) }, w
    end
    conv = math.max(conv - back * interval, 0)
    d = conv
    moved = true
  end
  local k = 0
  if conv <= burst then k = math.min(n, div(burst - conv, interval)) end
  local gap = conv + k * interval
  local w = nil
  if k > 0 or moved then w = write(gap) end
  if k > 0 or n == 0 then
    -- Taken (or only given back: a lease of nothing).
    local left = math.max(burst - gap, 0)
    local next = next_of(left, d, true)
    if k > 0 or moved then next = next_of(left, gap, false) end
    return { 1, now, left, interval, gap, 0, k, next }, w
  end
  -- Nothing to take: the wait for one token.
  local wait = math.max(d - (burst - interval), old_wait(1), 1)
  return { 0, now, level, interval, d, wait, 0, next_of(level, d, true) }, w
end

if mode == 'cancel' then
  -- Gives back the reservation's n tokens less those taken after it (ceil((tat - its tat) / I),
  -- never negative), as many as fit below the capacity (the last may only part fit), as
  -- Reservation::cancel_at does; nothing when its time has passed (a reading after its ready
  -- instant), when the state is not under this call's quota (another quota's tokens are not
  -- this reservation's), when no state is there (it expired: the bucket is full), or when a
  -- reading far from the reservation's leaves a span this script cannot count exactly. Only ever
  -- less than in process, never more.
  local rbase, rgap, rwait = whole(x1), whole(x2), whole(x3)
  if not rbase or not rgap or not rwait or rbase >= LIMIT or rgap > MAXD or rwait > MAXD then
    return bad('arguments')
  end
  local per_us = 1000 / tick
  local k = 0
  -- Passed: (now - rbase) us is more than rwait ticks.
  local passed = now > rbase and now - rbase > div(rwait, per_us)
  -- d at most MAXD (else a clock stepped back: nothing goes back), so that d + interval, in
  -- div_up, stays below 2^53.
  if n > 0 and raw and not old_d and not passed and d <= MAXD and d > 0 then
    local rd = until_tat(rbase, rgap, tick, tick)
    if rd < LIMIT then
      local after = 0
      if d > rd then after = div_up(d - rd, interval) end
      if after < n then
        k = math.min(n - after, div_up(d, interval))
      end
    end
  end
  local w = nil
  local gap = d
  if k > 0 then
    gap = math.max(d - k * interval, 0)
    w = write(gap)
  end
  local left = math.max(burst - gap, 0)
  return { 1, now, left, interval, gap, 0, k, next_of(left, gap, k == 0) }, w
end

if n == 0 then
  -- A query: what is there (for the meter: the queue, and the delay a request would get).
  return { 1, now, level, interval, conv, conv, conv, next_of(level, d, true) }
end

local cost = n * interval
local wait
if mode == 'strict' or mode == 'speek' then
  -- The meter's strict admission: only on an empty queue, whatever the quota.
  wait = d
else
  -- The conformance test: the gap the request leaves, d + cost, must fit the burst window,
  -- under both quotas.
  wait = math.max(d - (burst - cost), old_wait(n), 0)
end
if wait > 0 and mode == 'reserve' then
  -- Into debt: the tokens are taken now and are the caller's once the wait for them has
  -- passed, when that is at most the caller's max wait (x1 ticks) and the gap written stays
  -- within 2^52 ticks (the most a state holds: see above). The wait is also at least the time
  -- until the converted state reaches the burst line, so that the new quota holds as well.
  -- conv may be clamped at LIMIT (a reading 2^53 ticks before the state's), so no sum with it
  -- is formed before the gap is known to fit: every comparison is conv - (a span), exact.
  local max_wait = whole(x1)
  if not max_wait then return bad('arguments') end
  -- The gap written would be conv + cost; the wait until it reaches the burst line:
  if conv - (burst - cost) > wait then wait = conv - (burst - cost) end
  if wait <= max_wait and conv <= MAXD - cost then
    local gap = conv + cost
    return { 1, now, 0, interval, gap, wait, gap, next_of(0, gap, false) }, write(gap)
  end
  -- Not within reach: the wait until the same reservation would be granted, when both its wait
  -- is at most max_wait and its gap at most MAXD: max(wait - max_wait, gap - MAXD).
  local retry = math.max(wait - max_wait, conv - (MAXD - cost))
  return { 0, now, level, interval, d, retry, d, next_of(level, d, true) }
end
if wait > 0 then
  return { 0, now, level, interval, d, wait, d, next_of(level, d, true) }
end

-- Admitted: tat becomes now + gap (the converted span plus the cost).
local gap = conv + cost
local w = nil
if mode == 'take' or mode == 'strict' or mode == 'schedule' or mode == 'reserve' then
  w = write(gap)
end
-- The state written (or, for a peek, that would be) is under this call's quota alone. A
-- reservation whose tokens are there answers a wait of 0 (the schedule's delay field).
local shown = conv
if mode == 'reserve' then shown = 0 end
return { 1, now, burst - gap, interval, gap, shown, gap, next_of(burst - gap, gap, false) }, w
end
