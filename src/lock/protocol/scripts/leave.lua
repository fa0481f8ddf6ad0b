-- A waiter gives up: leave the queue now rather than when its place expires, and if it was
-- at the head, wake the others (the next one may take a free lock at once).
-- KEYS: queue, queue expiry, release channel. ARGV: waiter id.
-- Returns 1 if it was in the queue, 0 otherwise.
local head = redis.call('ZRANGE', KEYS[1], 0, 0)[1]
local removed = redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('ZREM', KEYS[2], ARGV[1])
if removed == 1 and head == ARGV[1] then
  redis.pcall('PUBLISH', KEYS[3], '1')
end
return removed
