-- `resume`: end a pause now, and wake the queue's head at once if the lock is free, so that
-- waiters need not wait for their next poll.
-- KEYS: lock. ARGV: pause key, queue, queue expiry, release channel.
-- Returns 1 when a pause was ended, 0 when there was none; TRYAGAIN (reach.lua).
local lock = KEYS[1]
local pause, queue, expiry, channel = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
if not here(pause) then
  return split()
end
if redis.call('DEL', pause) == 0 then
  return 0
end
local kind = type_here(lock)
if kind == 'none' then
  redis.pcall('PUBLISH', channel, whom_to_wake(queue, expiry))
elseif kind == 'zset' then
  redis.pcall('PUBLISH', channel, '1')
end
return 1
