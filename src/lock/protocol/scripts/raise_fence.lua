-- Redlock's fence write-back: raise the fence counter to the fence the run will use, but only
-- while this node still holds our token, so that every later grant on this node counts from
-- it (see lock/topology/quorum.rs for why the maximum must be written back).
-- KEYS: lock, fence counter, holder hash. ARGV: token, fence, fence counter ttl ms.
-- Returns 1 when the token was there (the counter is now at least the fence), 0 otherwise.
if redis.call('TYPE', KEYS[1]).ok ~= 'string' or redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
-- The acquire script on this node wrote a valid counter a moment ago; compare as numbers
-- (exact below 2^53, the same bound acquire.lua keeps).
local last = tonumber(redis.call('GET', KEYS[2]) or '0') or 0
if tonumber(ARGV[2]) > last then
  redis.call('SET', KEYS[2], ARGV[2], 'PX', ARGV[3])
end
-- `status` shows the fence the run actually uses.
if redis.call('HGET', KEYS[3], 'token') == ARGV[1] then
  redis.call('HSET', KEYS[3], 'fence', ARGV[2])
end
return 1
