-- Take back an acquire whose reply was lost, and make sure it cannot land later: the request
-- may still be on its way (a retransmission, a slow middlebox) and arrive after this script.
-- KEYS: lock. ARGV: holder hash, release channel, cancelled tokens (a set), queue, queue
-- expiry; then token, how long cancelled tokens are remembered (ms), announce ('0': do not
-- announce, see release.lua).
-- Returns 1 when the lock held the token and was released, 0 otherwise; TRYAGAIN
-- (reach.lua).
local lock, holder, channel, cancelled = KEYS[1], ARGV[1], ARGV[2], ARGV[3]
local queue, expiry = ARGV[4], ARGV[5]
local token, remember, announce = ARGV[6], ARGV[7], ARGV[8]
local kind = type_here(lock)
if not kind then
  return split()
end
-- Where the set is out of reach (the node a migrating slot leaves, while the lock is still
-- there), the late attempt cannot land anyway: that node creates no lock key, and the one it
-- has is deleted below if it holds the token.
if here(cancelled) then
  redis.call('SADD', cancelled, token)
  redis.call('PEXPIRE', cancelled, remember)
end
if kind == 'string' and redis.call('GET', lock) == token then
  redis.call('DEL', lock)
  if here(holder) then
    redis.call('DEL', holder)
  end
  if announce ~= '0' then
    redis.pcall('PUBLISH', channel, whom_to_wake(queue, expiry))
  end
  return 1
end
return 0
