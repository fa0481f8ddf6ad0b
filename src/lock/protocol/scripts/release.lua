-- Release the lock if it still holds our token; never touch anyone else's.
-- KEYS: lock, holder hash, release channel. ARGV: token, keep ms, announce ('0': do not
-- announce the release: a take-back of a grant on a minority of Redlock nodes, where the lock
-- was never free, would only wake the waiters, this run among them).
-- keep > 0 (--hold-at-least): leave the lock to expire after keep ms instead of deleting it.
-- Returns 1 released, 0 held by another value, -1 already gone.
local kind = redis.call('TYPE', KEYS[1]).ok
if kind == 'none' then
  return -1
end
if kind ~= 'string' or redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
local keep = tonumber(ARGV[2])
if keep > 0 then
  redis.call('PEXPIRE', KEYS[1], keep)
  redis.call('PEXPIRE', KEYS[2], keep)
else
  redis.call('DEL', KEYS[1], KEYS[2])
  -- Wake the waiters now instead of at their next poll.
  -- pcall: an ACL user without channel access still releases; waiters then just poll.
  if ARGV[3] ~= '0' then
    redis.pcall('PUBLISH', KEYS[3], '1')
  end
end
return 1
