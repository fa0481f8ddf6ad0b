-- A waiter keeps its place in the queue where an acquire could not queue it: while the lock's
-- slot is being migrated, the lock and its queue may be on different nodes, or the lock be
-- free with its other keys still on the node the slot leaves, where no lock can be created
-- and from where no other node can see the queue. Sent by cluster.rs, routed by the queue,
-- so that the waiters keep their order until the acquire can run again.
-- KEYS: queue. ARGV: queue expiry, lock; then waiter id, how long its place is kept (ms).
-- Returns acquire.lua's busy reply, without holder: {0, pttl, '', '', '', queued, place}
-- (pttl -2 where the lock is out of reach); TRYAGAIN (reach.lua).
local queue, expiry, lock = KEYS[1], ARGV[1], ARGV[2]
local waiter, keep = ARGV[3], tonumber(ARGV[4])
if not queue_here(queue, expiry) then
  return split()
end
local bad_queue = check_kinds(lock, 'zset', {queue, expiry})
if bad_queue then
  return bad_queue
end
local now_us, now_ms = server_now()
reap_waiters(queue, expiry, now_ms, 1)
if not queue_here(queue, expiry) then
  -- The reaping emptied the queue on the node the slot leaves, which cannot create it again.
  return split()
end
local place = keep_place(queue, expiry, waiter, now_us, now_ms, keep)
local pttl = -2
if here(lock) then
  pttl = redis.call('PTTL', lock)
end
return {0, pttl, '', '', '', redis.call('ZCARD', queue), place}
