-- The leaky meter (src/leaky/meter.rs): strict admission on an empty queue, its peek, or a place
-- in the queue (schedule). gcra.lua follows.
local KIND = 'meter'
