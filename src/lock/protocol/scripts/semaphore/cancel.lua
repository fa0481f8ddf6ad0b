-- Take back an acquire whose reply was lost, and make sure it cannot land later.
-- KEYS: lock (zset), holders, release channel, cancelled tokens.
-- ARGV: token, how long cancelled tokens are remembered (ms).
-- Returns 1 when our permit was taken back, 0 otherwise.
redis.call('SADD', KEYS[4], ARGV[1])
redis.call('PEXPIRE', KEYS[4], ARGV[2])
if redis.call('TYPE', KEYS[1]).ok == 'zset' and redis.call('ZREM', KEYS[1], ARGV[1]) == 1 then
  redis.call('HDEL', KEYS[2], ARGV[1])
  redis.pcall('PUBLISH', KEYS[3], '1')
  return 1
end
return 0
