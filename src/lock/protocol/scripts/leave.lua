-- A waiter gives up: leave the queue now rather than when its place expires, and if it was
-- at the head, wake the next one (it may take a free lock at once; wake.lua).
-- KEYS: queue. ARGV: queue expiry, release channel; then waiter id.
-- Returns 1 if it was in the queue, 0 otherwise; TRYAGAIN (reach.lua).
local queue, expiry, channel, waiter = KEYS[1], ARGV[1], ARGV[2], ARGV[3]
if not here(queue) then
  return split()
end
local head = redis.call('ZRANGE', queue, 0, 0)[1]
local removed = redis.call('ZREM', queue, waiter)
if here(expiry) then
  redis.call('ZREM', expiry, waiter)
end
if removed == 1 and head == waiter then
  redis.pcall('PUBLISH', channel, whom_to_wake(queue, expiry))
end
return removed
