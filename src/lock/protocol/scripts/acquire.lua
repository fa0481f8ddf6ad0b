-- Take the lock if it is free, in one atomic step: SET with a TTL, a new fence, holder info.
-- With a waiter id, in arrival order: the waiter takes a free lock only from the head of the
-- queue, and joins (or stays in) the queue while it cannot.
-- KEYS: lock.
-- ARGV: fence counter, holder hash, cancelled tokens, queue (waiter ids by arrival, server
-- microseconds), queue expiry (waiter ids by the server ms at which they leave); then token,
-- ttl ms, fence counter ttl ms, host, pid, command, waiter id ('' = does not wait: never
-- queues), how long a waiter's place is kept without a new attempt (ms); then the pause key
-- and the holder's note ('' = none); then the shared holders' set (--shared,
-- shared/acquire.lua: while it has a live lease, the lock is busy), the limit key and the
-- holders hash (read to tell a lock of another kind from somebody else's key, and who the
-- shared holders are).
-- Returns {1, fence} when acquired; {0, pttl, host, pid, acquired_ms, queued, place,
-- finished_ms, kept_until_ms, pause reason, pause host, pause until_ms, shared} when busy
-- (pttl -2: the lock is free but waiters come first; queued: waiters in the queue; place:
-- this waiter's place in it, 1 = next, 0 = not queued; finished_ms and kept_until_ms ''
-- unless the holder's command finished and --hold-at-least keeps the lock; the pause's
-- fields '' unless the lock is paused; shared: how many shared holders keep it, pttl then
-- being the time left on the longest of their leases, host, pid and acquired_ms those of
-- the one holder when there is one, finished_ms and kept_until_ms set when the command of
-- every one of them finished and --hold-at-least keeps its share); {2} for an attempt that was
-- cancelled (its reply has no reader); TRYAGAIN when keys it needs are out of reach
-- (reach.lua).
-- Every check that can fail runs before the first write: a script that errors half-way
-- would otherwise leave a lock behind that nobody knows it holds.
--
-- Where some keys are out of reach (the node a migrating slot leaves), the lock key is there
-- (it is the declared key), so the lock is held: by another (a busy reply, in which only the
-- queue's figures depend on the keys out of reach) or by our own token (taken anew only if
-- this node still has the fence counter and the holder info). A free lock is only ever taken
-- where every key is in reach.
local lock = KEYS[1]
local fence_key, holder, cancelled, queue, expiry = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]
local token, ttl = ARGV[6], ARGV[7]
local waiter, keep = ARGV[12], tonumber(ARGV[13])
local pause, note = ARGV[14] or '', ARGV[15] or ''
-- --shared: the set of shared holders (shared/acquire.lua).
local shared = ARGV[16] or ''
local limit_key, holders = ARGV[17], ARGV[18]

-- The usual case costs one command for all of them (reach.lua): none of them exists, and
-- every key is in reach. Then no check on them is needed, no queue can hold anyone and no
-- shared holder the lock. A pause key counts as "queued": the slower path below reads it.
local probed = {cancelled, queue, expiry}
for _, key in ipairs({pause, shared}) do
  if key ~= '' then
    probed[#probed + 1] = key
  end
end
local none_queued = probe(probed) == 0

local kind, value = read_string(lock)
if not kind then
  -- The lock left this node since Redis routed the script here (it expired just now).
  return split()
end

-- An attempt that its run already took back (cancel.lua) arrived late: it must not land.
-- Where the set is out of reach, the lock is held (see above), and a lock holding our token
-- is ours: a take-back deletes it wherever it is.
if not none_queued and here(cancelled) and redis.call('SISMEMBER', cancelled, token) == 1 then
  return {2}
end

if kind == 'zset' then
  local limited = limit_recorded(limit_key)
  if limited == nil then
    return split()
  elseif not limited then
    return not_a_limit_lock(lock, limit_key)
  end
  -- LIMITMISMATCH: a configuration error, told apart from a Redis failure (lock/error.rs).
  return redis.error_reply('LIMITMISMATCH the lock ' .. lock ..
    ' is used with --limit elsewhere and this run has none; give every user of a lock the' ..
    ' same --limit (nothing was changed)')
elseif kind ~= 'none' and kind ~= 'string' then
  return not_a_lock(lock, lock, 'holds ' .. kind_words(kind))
end
if not none_queued then
  local bad_queue = check_kinds(lock, 'zset', {queue, expiry})
  if bad_queue then
    return bad_queue
  end
end
-- nil while the counter is out of reach.
local last
if here(fence_key) then
  local bad_fence
  last, bad_fence = last_fence(lock, fence_key)
  if bad_fence then
    return bad_fence
  end
end

local now_us, now_ms = server_now()
if not none_queued and queue_here(queue, expiry) then
  reap_waiters(queue, expiry, now_ms, 1)
end

-- The pause in force (prelude.lua); none when the probe found none of the rare keys.
local function paused_now()
  if none_queued then
    return nil
  end
  return pause_in_force(pause)
end
local paused

-- --shared: ms left on the longest shared lease, when shared holders keep the lock.
local shared_left

-- --shared: what is known of the `n` shared holders that keep the lock: host, pid and
-- acquired_ms of the one when there is one; the latest finish and the latest end when the
-- command of every one finished and --hold-at-least keeps its share (shared/release.lua
-- notes `TOKEN:kept` beside its info); '' for what is not known. A holder that still runs
-- renews its lease: then nobody can tell when the lock is free. (The holders hash, where in
-- reach, is a hash: checked before shared_left was set.)
local function shared_known(n)
  local host, pid, since, finished, kept_until = '', '', '', '', ''
  if n > 100 or not here(holders) then
    return host, pid, since, finished, kept_until
  end
  local live = redis.call('ZRANGEBYSCORE', shared, '(' .. now_ms, '+inf')
  if #live == 1 then
    local info = redis.call('HGET', holders, live[1])
    if info then
      host, pid, since = string.match(info, '^([^\t]*)\t([^\t]*)\t([^\t]*)\t')
    end
  end
  local last_finish, last_end = 0, 0
  for _, member in ipairs(live) do
    local f, u = string.match(redis.call('HGET', holders, member .. ':kept') or '',
      '^(%d+)\t(%d+)$')
    if not f then
      return host or '', pid or '', since or '', '', ''
    end
    last_finish, last_end = math.max(last_finish, tonumber(f)), math.max(last_end, tonumber(u))
  end
  if #live > 0 then
    finished, kept_until = string.format('%.0f', last_finish), string.format('%.0f', last_end)
  end
  return host or '', pid or '', since or '', finished, kept_until
end
-- Join the queue, or keep our place in it, and say who holds the lock and where we stand.
local function busy()
  local place = 0
  -- Asked anew: the reaping may have emptied the queue, and a node that cannot reach a key
  -- cannot create it either.
  if waiter ~= '' and queue_here(queue, expiry) then
    place = keep_place(queue, expiry, waiter, now_us, now_ms, keep)
  end
  -- Report who holds it, but only if the holder info belongs to the current value:
  -- a lock taken by another client on a raw key has no (or stale) holder info.
  local host, pid, since, finished, kept_until = '', '', '', '', ''
  if value then
    local info = redis.pcall('HMGET', holder, 'token', 'host', 'pid', 'acquired_ms',
      'finished_ms', 'kept_until_ms')
    if type(info) == 'table' and not info.err and info[1] == value then
      host, pid, since = info[2] or '', info[3] or '', info[4] or ''
      finished, kept_until = info[5] or '', info[6] or ''
    end
  end
  local queued = 0
  if place > 0 then
    queued = redis.call('ZCARD', queue)
  elseif not none_queued and here(queue) then
    queued = redis.call('ZCARD', queue)
  end
  local pttl, shared_n = redis.call('PTTL', lock), 0
  if shared_left then
    pttl, shared_n = shared_left, redis.call('ZCOUNT', shared, '(' .. now_ms, '+inf')
    host, pid, since, finished, kept_until = shared_known(shared_n)
  end
  local reply = {0, pttl, host, pid, since, queued, place, finished, kept_until, '', '', '',
    shared_n}
  -- A run held off by a holder hears of the pause too: it is busy after that holder.
  paused = paused or paused_now()
  if paused then
    reply[10], reply[11], reply[12] = paused[1], paused[2], paused[3]
  end
  return reply
end

-- Our own token is ours whatever the queue says: an earlier attempt of this run landed
-- although its reply was lost (a timeout). It is taken anew below, with a new fence and a
-- fresh TTL.
if kind == 'string' and value ~= token then
  return busy()
end
-- --shared: a free lock is not free while a shared holder's lease lasts (busy reports the
-- time left on the longest one).
if kind == 'none' and not none_queued then
  if not here(shared) then
    return split()
  end
  local bad_shared = check_kinds(lock, 'zset', {shared})
  if bad_shared then
    return bad_shared
  end
  local longest = redis.call('ZRANGE', shared, -1, -1, 'WITHSCORES')[2]
  if longest and tonumber(longest) > now_ms then
    -- Live leases that no --shared run took (somebody else's set) would keep the lock
    -- busy forever.
    local bad_holders = check_kinds(lock, 'hash', {holders})
    if bad_holders then
      return bad_holders
    end
    if not shared_ours(shared, holders) then
      return not_shared_holders(lock, shared, holders)
    end
    shared_left = math.ceil(tonumber(longest) - now_ms)
    return busy()
  end
end
if kind == 'none' then
  if not queue_here(queue, expiry) then
    -- Never so (see above): a free lock is only seen where every key is in reach.
    return split()
  end
  -- Paused: busy, and a waiter keeps its place (busy() keeps it) until resume or expiry.
  paused = paused_now()
  if paused then
    return busy()
  end
  if not none_queued and redis.call('ZCARD', queue) > 0 then
    -- Free, but others queued first: only the head may take it (a run that does not wait
    -- never jumps the queue either).
    local head = redis.call('ZRANGE', queue, 0, 0)[1]
    if waiter == '' or head ~= waiter then
      return busy()
    end
  end
end
-- Taking it writes the fence counter and the holder info.
if not last or not here(holder) then
  return split()
end

local fence_str, end_of_range = next_fence(fence_key, last, now_us)
if not fence_str then
  return end_of_range
end
-- The holder info first: a holder key of another type is replaced, and where it could be
-- deleted but not created again (a migration), the script stops before anything else.
-- Where every key is in reach, HSET itself says whether the key holds another type (its
-- only error that a DEL cures); elsewhere TYPE asks first.
local info = {'token', token, 'host', ARGV[9], 'pid', ARGV[10], 'cmd', ARGV[11],
  'acquired_ms', string.format('%.0f', now_ms), 'fence', fence_str, 'note', note}
if everywhere then
  local written = redis.pcall('HSET', holder, unpack(info))
  if type(written) == 'table' then
    if not string.find(written.err or '', 'WRONGTYPE', 1, true) then
      -- Any other refusal (a read-only replica, no permission) stops the script as it
      -- would have without the pcall, before any write.
      redis.call('HSET', holder, unpack(info))
    end
    redis.call('DEL', holder)
    redis.call('HSET', holder, unpack(info))
  end
else
  if type_here(holder) ~= 'hash' then
    redis.call('DEL', holder)
  end
  redis.call('HSET', holder, unpack(info))
end
redis.call('PEXPIRE', holder, ttl)
if waiter ~= '' and not none_queued then
  leave_queue(queue, expiry, waiter)
end
redis.call('SET', lock, token, 'PX', ttl)
redis.call('SET', fence_key, fence_str, 'PX', ARGV[8])
return {1, fence_str}
