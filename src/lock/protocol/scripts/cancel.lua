-- Take back an acquire whose reply was lost, and make sure it cannot land later: the request
-- may still be on its way (a retransmission, a slow middlebox) and arrive after this script.
-- KEYS: lock, holder hash, release channel, cancelled tokens (a set).
-- ARGV: token, how long cancelled tokens are remembered (ms), announce ('0': do not announce,
-- see release.lua).
-- Returns 1 when the lock held the token and was released, 0 otherwise.
redis.call('SADD', KEYS[4], ARGV[1])
redis.call('PEXPIRE', KEYS[4], ARGV[2])
if redis.call('TYPE', KEYS[1]).ok == 'string' and redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1], KEYS[2])
  if ARGV[3] ~= '0' then
    redis.pcall('PUBLISH', KEYS[3], '1')
  end
  return 1
end
return 0
