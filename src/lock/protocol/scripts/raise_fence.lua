-- Redlock's fence write-back: raise the fence counter to the fence the run will use, but only
-- while this node still holds our token, so that every later grant on this node counts from
-- it (see lock/topology/quorum/mod.rs for why the maximum must be written back).
-- KEYS: lock. ARGV: fence counter, holder hash; then token, fence, fence counter ttl ms.
-- Returns 1 when the token was there (the counter is now at least the fence), 0 otherwise;
-- TRYAGAIN (reach.lua; Redlock's nodes are single servers, where every key is in reach).
local lock, fence_key, holder = KEYS[1], ARGV[1], ARGV[2]
local token, fence = ARGV[3], tonumber(ARGV[4])
local kind = type_here(lock)
if not kind or not here(fence_key) then
  return split()
end
if kind ~= 'string' or redis.call('GET', lock) ~= token then
  return 0
end
-- The acquire script on this node wrote a valid counter a moment ago; compare as numbers
-- (exact below 2^53, the same bound acquire.lua keeps).
local last = tonumber(redis.call('GET', fence_key) or '0') or 0
if fence > last then
  redis.call('SET', fence_key, ARGV[4], 'PX', ARGV[5])
end
-- `status` shows the fence the run actually uses.
if here(holder) and redis.call('HGET', holder, 'token') == token then
  redis.call('HSET', holder, 'fence', ARGV[4])
end
return 1
