-- Take back a shared acquire whose reply was lost, and make sure it cannot land later.
-- KEYS: shared holders (zset). ARGV: holders, release channel, cancelled tokens, queue,
-- queue expiry; then token, how long cancelled tokens are remembered (ms).
-- Returns 1 when our hold was taken back, 0 otherwise; TRYAGAIN (reach.lua).
local shared, holders, channel, cancelled = KEYS[1], ARGV[1], ARGV[2], ARGV[3]
local queue, expiry, token = ARGV[4], ARGV[5], ARGV[6]
local kind = type_here(shared)
if not kind then
  return split()
end
-- Where the set of cancelled tokens is out of reach, no shared hold is taken (acquire.lua).
if here(cancelled) then
  redis.call('SADD', cancelled, token)
  redis.call('PEXPIRE', cancelled, ARGV[7])
end
if kind == 'zset' and redis.call('ZREM', shared, token) == 1 then
  if here(holders) then
    redis.call('HDEL', holders, token)
  end
  if redis.call('ZCARD', shared) == 0 then
    redis.pcall('PUBLISH', channel, whom_to_wake(queue, expiry))
  end
  return 1
end
return 0
