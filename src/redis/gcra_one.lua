-- One key (after gcra.lua): KEYS[1] holds its state. ARGV: mode, n, interval, capacity, tick,
-- client time (tests only; '' for the server's TIME), then the mode's own arguments (lease: the
-- tokens given back; reserve: the longest wait, in ticks; cancel: the reservation's reading, the
-- gap it wrote and its wait in ticks). Reply: gcra's (see gcra.lua).

local interval, capacity, tick = whole(ARGV[3]), whole(ARGV[4]), whole(ARGV[5])
local reply, w = gcra(KEYS[1], ARGV[1], whole(ARGV[2]), interval, capacity, tick, reading(6),
  ARGV[7], ARGV[8], ARGV[9])
if w then
  set_expiring(string.format('%d %d %d %d %d', w[1], w[2], interval, capacity, tick), w[3])
end
return reply
