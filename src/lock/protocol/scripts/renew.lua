-- Extend the lease if the lock still holds our token.
-- KEYS: lock. ARGV: holder hash; then token, ttl ms; then the broken marks (break.lua).
-- Returns 1 renewed, 0 not ours (lost), or {0, 'host TAB ms'} when lost to a `break` (who
-- broke it, and when); TRYAGAIN (reach.lua). Only the lock decides: holder
-- info this node cannot reach (a migration) keeps its own TTL.
local lock, holder, token, ttl = KEYS[1], ARGV[1], ARGV[2], ARGV[3]
local kind = type_here(lock)
if not kind then
  return split()
end
if kind == 'string' and redis.call('GET', lock) == token then
  redis.call('PEXPIRE', lock, ttl)
  if here(holder) then
    redis.call('PEXPIRE', holder, ttl)
  end
  return 1
end
return lost(ARGV[4], token)
