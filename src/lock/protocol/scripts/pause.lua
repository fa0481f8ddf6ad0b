-- `pause`: hold off new runs of the lock until `resume` or until the pause expires (it
-- always does: the key has the pause's length as its TTL). A running holder is not touched,
-- and waiters keep their places (the acquire scripts answer busy while paused).
-- KEYS: lock. ARGV: pause key; then reason, host, length (ms).
-- Replaces an earlier pause. Returns the server time (ms) at which it ends; TRYAGAIN
-- (reach.lua) when the pause key is out of reach (a migration of the slot).
local pause = ARGV[1]
local reason, by, length = ARGV[2], ARGV[3], tonumber(ARGV[4])
if not here(pause) then
  return split()
end
local bad = check_kinds(KEYS[1], 'hash', {pause})
if bad then
  return bad
end
local _, now_ms = server_now()
local until_ms = string.format('%.0f', now_ms + length)
redis.call('HSET', pause, 'reason', reason, 'host', by,
  'since_ms', string.format('%.0f', now_ms), 'until_ms', until_ms)
redis.call('PEXPIRE', pause, length)
return until_ms
