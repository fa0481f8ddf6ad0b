-- Prepended to every script (protocol/mod.rs). Every script declares one key, KEYS[1], which
-- is where Redis Cluster runs it; the lock's other keys are named in ARGV (all in the same
-- hash slot, protocol/keys.rs). Why: while the slot is being migrated, Redis refuses a script
-- whose declared keys are not all on the node it reaches (ASK, TRYAGAIN), and companions
-- such as the waiters' queue often exist nowhere. See protocol/mod.rs.
--
-- During such a migration the node the slot leaves (MIGRATING) runs a command only on keys
-- it still has: any other key of the slot is on the node the slot goes to, or nowhere, and
-- here it can be neither read nor created (the command fails). Every other node (one whose
-- slot is not moving; the importing node, behind ASKING) reaches every key of the slot.

-- The type of `key` ('none' if it does not exist), or nil when this node cannot reach it.
-- Only that refusal is taken for "out of reach" (its words are the same in Redis 6.2, 7 and
-- Valkey); any other error (no permission for the key, the cluster down) stops the script
-- as redis.call would.
local function type_here(key)
  local reply = redis.pcall('TYPE', key)
  if reply.err and not string.find(reply.err, 'non local key', 1, true) then
    redis.call('TYPE', key)
  end
  return reply.ok
end

-- Whether this node can read and write `key` (which may still not exist).
local function here(key)
  return type_here(key) ~= nil
end

-- This script cannot do its work here with the keys this node reaches (a migration of the
-- lock's slot is under way): nothing was written, but for what any script may do at any
-- time (drop ended leases and places). The client pauses and sends it again
-- (lock/topology/cluster.rs), by when the migration has moved on.
local function split()
  return redis.error_reply('TRYAGAIN the keys of this lock are being migrated between nodes')
end
