-- Several limits on one key, all or none (after gcra.lua): KEYS[i] holds limit i's state (the
-- names share one hash tag, so one cluster slot). ARGV: mode (take or peek), n, client time
-- (tests only; '' for the server's TIME), then interval, capacity and tick of each limit, in the
-- order of KEYS. Every limit is decided first, writing nothing; only when every one admits, and
-- the mode is take, are their writes made, at the one reading. n = 0 is a query of every limit.
-- Reply: each limit's reply (gcra's 8 integers), one after the other in the order of KEYS: every
-- one admitting is an admission, any one denying a refusal that wrote nothing.

local mode = ARGV[1]
local count = #KEYS
if (mode ~= 'take' and mode ~= 'peek') or count < 1 or #ARGV ~= 3 + 3 * count then
  return bad('arguments')
end
local n = whole(ARGV[2])
local now = reading(3)
local replies, writes = {}, {}
local all = true
for i = 1, count do
  local j = 1 + 3 * i
  local reply, w = gcra(KEYS[i], mode, n, whole(ARGV[j]), whole(ARGV[j + 1]),
    whole(ARGV[j + 2]), now)
  if reply.err then return reply end
  if reply[1] ~= 1 then all = false end
  writes[i] = w or false
  for f = 1, 8 do replies[#replies + 1] = reply[f] end
end
if all and mode == 'take' then
  for i = 1, count do
    local w = writes[i]
    if w then
      local j = 1 + 3 * i
      set_expiring_key(KEYS[i], string.format('%d %d %d %d %d', w[1], w[2], whole(ARGV[j]),
        whole(ARGV[j + 1]), whole(ARGV[j + 2])), w[3])
    end
  end
end
return replies
