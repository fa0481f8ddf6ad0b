-- Take back an acquire whose reply was lost, and make sure it cannot land later.
-- KEYS: lock (zset). ARGV: holders, release channel, cancelled tokens; then token, how long
-- cancelled tokens are remembered (ms).
-- Returns 1 when our permit was taken back, 0 otherwise; TRYAGAIN (reach.lua).
local lock, holders, channel, cancelled = KEYS[1], ARGV[1], ARGV[2], ARGV[3]
local token = ARGV[4]
local kind = type_here(lock)
if not kind then
  return split()
end
-- Where the set of cancelled tokens is out of reach (the node a migrating slot leaves), no new
-- permit is taken (acquire.lua), so the late attempt cannot land there either.
if here(cancelled) then
  redis.call('SADD', cancelled, token)
  redis.call('PEXPIRE', cancelled, ARGV[5])
end
if kind == 'zset' and redis.call('ZREM', lock, token) == 1 then
  if here(holders) then
    redis.call('HDEL', holders, token)
  end
  redis.pcall('PUBLISH', channel, '1')
  return 1
end
return 0
