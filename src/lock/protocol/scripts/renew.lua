-- Extend the lease if the lock still holds our token.
-- KEYS: lock, holder hash. ARGV: token, ttl ms. Returns 1 renewed, 0 not ours (lost).
if redis.call('TYPE', KEYS[1]).ok == 'string' and redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  redis.call('PEXPIRE', KEYS[2], ARGV[2])
  return 1
end
return 0
