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

-- Set by probe: this node reaches every key of the lock's slot for the rest of the script,
-- and nothing needs asking key by key.
local everywhere = false

-- One command instead of a TYPE per key: EXISTS of two or more keys of the lock's slot that
-- usually do not exist (the queue, the cancelled tokens). Answered without an error, and
-- with at least one of them missing, it proves that this node reaches every key of the
-- slot: the node a slot is leaving (MIGRATING) refuses a command on several keys unless it
-- has them all (TRYAGAIN, or ASK when it has none), the node importing it refuses one on
-- several keys it does not all have (TRYAGAIN), and a node that does not serve the slot
-- refuses any (MOVED). No migration step can happen while a script runs. Outside a cluster
-- every key is always in reach. Returns how many of `keys` exist when that proof was had,
-- else nil (the keys are then looked at one by one, as `type_here` does).
local function probe(keys)
  local n = redis.pcall('EXISTS', unpack(keys))
  if type(n) == 'number' and n < #keys then
    everywhere = true
    return n
  end
  return nil
end

-- The type of `key` ('none' if it does not exist), or nil when this node cannot reach it.
-- Only that refusal is taken for "out of reach" (its words are the same in Redis 6.2, 7 and
-- Valkey); any other error (no permission for the key, the cluster down) stops the script
-- as redis.call would.
local function type_here(key)
  if everywhere then
    return redis.call('TYPE', key).ok
  end
  local reply = redis.pcall('TYPE', key)
  if reply.err and not string.find(reply.err, 'non local key', 1, true) then
    redis.call('TYPE', key)
  end
  return reply.ok
end

-- Whether this node can read and write `key` (which may still not exist).
local function here(key)
  return everywhere or type_here(key) ~= nil
end

-- `key`'s value and type in one command where every key is in reach: GET answers a string
-- or nothing, and any other type with an error, which TYPE then names. Elsewhere TYPE first
-- (nil: out of reach), then GET for a string. Returns kind, value.
local function read_string(key)
  if everywhere then
    local value = redis.pcall('GET', key)
    if type(value) == 'table' then
      local kind = type_here(key)
      if kind == 'string' then
        -- Not a type error (no permission for GET?): stop as redis.call would.
        redis.call('GET', key)
      end
      return kind, nil
    end
    return value and 'string' or 'none', value or nil
  end
  local kind = type_here(key)
  if kind == 'string' then
    return kind, redis.call('GET', key)
  end
  return kind, nil
end

-- This script cannot do its work here with the keys this node reaches (a migration of the
-- lock's slot is under way): nothing was written, but for what any script may do at any
-- time (drop ended leases and places). The client pauses and sends it again
-- (lock/topology/cluster.rs), by when the migration has moved on.
local function split()
  return redis.error_reply('TRYAGAIN the keys of this lock are being migrated between nodes')
end

-- TYPE's name for a kind of value, in words.
local function kind_words(kind)
  local words = {string = 'a string', hash = 'a hash', list = 'a list', set = 'a set',
    zset = 'a sorted set', stream = 'a stream'}
  return words[kind] or ('a ' .. kind)
end

-- The refusal of a lock one of whose keys (`key`; the lock's own key itself, or a companion)
-- holds what redlock-run never writes there: another client's key, or --key / --prefix naming
-- the wrong one. Given before any write; `what` says what the key holds. One sentence that
-- error.rs passes on as it is (exit 69, as any key of another type).
local function not_a_lock(lock, key, what)
  local which = key == lock and 'it' or ('its key ' .. key)
  return redis.error_reply('WRONGTYPE ' .. lock .. ' is not a redlock-run lock: ' .. which ..
    ' ' .. what)
end
