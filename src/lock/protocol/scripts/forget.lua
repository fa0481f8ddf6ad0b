-- `forget`: clear the run record of a lock (protocol/record.rs). The lock itself is left
-- alone. KEYS: last-run. ARGV: last-success.
-- Returns how many of the two keys existed; TRYAGAIN (reach.lua) if this node cannot reach
-- one of them (a migration of the slot).
local gone = 0
for _, key in ipairs({KEYS[1], ARGV[1]}) do
  if not here(key) then
    return split()
  end
  gone = gone + redis.call('DEL', key)
end
return gone
