-- Take a shared hold (--shared) if no exclusive run holds the lock or waits before us, in
-- one atomic step. Shared holders are the members of a sorted set beside the lock, scored by
-- when their lease ends on the server's clock (as --limit permits are): a holder that dies
-- just expires. The lock key itself stays the exclusive holder's (acquire.lua), which in turn
-- waits until no shared lease is left.
-- The queue is the one exclusive runs use, in one arrival order for both kinds: a shared
-- waiter's id starts with 'shared:' (supervise/acquire.rs). A shared run goes in when no
-- exclusive waiter is ahead of it (a run that does not wait: none queued at all), so
-- consecutive shared waiters go in together, and an exclusive waiter keeps every later
-- shared run out.
-- KEYS: shared holders (zset: token -> lease end, server ms).
-- ARGV: lock, fence counter, holder hash (the exclusive holder's), holders (hash: token ->
-- shared holder's info), cancelled tokens, queue, queue expiry; then token, ttl ms, fence
-- counter ttl ms, host, pid, command, waiter id ('' = does not wait), how long a waiter's
-- place is kept (ms); then the pause key (`pause`), the holder's note ('' = none) and the
-- limit key (read only to tell a --limit lock from somebody else's sorted set).
-- Returns acquire.lua's replies: {1, fence}; {0, pttl, host, pid, acquired_ms, queued,
-- place, finished_ms, kept_until_ms} (the exclusive holder; finished_ms and kept_until_ms
-- '' unless its command finished and --hold-at-least keeps the lock; pttl -2: free, but an
-- exclusive waiter comes first or the lock is paused, the pause's reason, host and end then
-- at 10-12); {2} for a cancelled attempt; TRYAGAIN (reach.lua).
-- Every check that can fail runs before the first write. A shared hold is only ever taken
-- where every key of the lock is in reach (not on either node while its slot migrates: the
-- cluster client tries again, a waiter keeping its place, topology/cluster.rs).
local shared = KEYS[1]
local lock, fence_key, holder, holders, cancelled, queue, expiry =
  ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6], ARGV[7]
local token, ttl = ARGV[8], tonumber(ARGV[9])
local waiter, keep = ARGV[14], tonumber(ARGV[15])
local pause, note = ARGV[16] or '', ARGV[17] or ''
local limit_key = ARGV[18]

-- The usual case proves in one command that every key is in reach (reach.lua).
probe({cancelled, queue, expiry})
for _, key in ipairs({lock, fence_key, holder, holders, cancelled, queue, expiry}) do
  if not here(key) then
    return split()
  end
end

if redis.call('SISMEMBER', cancelled, token) == 1 then
  return {2}
end

local kind, value = read_string(lock)
if kind == 'zset' then
  local limited = limit_recorded(limit_key)
  if limited == nil then
    return split()
  elseif not limited then
    return not_a_limit_lock(lock, limit_key)
  end
  -- LIMITMISMATCH: a configuration error, as a limit mismatch (lock/error.rs).
  return redis.error_reply('LIMITMISMATCH the lock ' .. lock ..
    ' is used with --limit (several holders); --shared cannot share it: use the same ' ..
    'options as its other users')
elseif kind ~= 'none' and kind ~= 'string' then
  return not_a_lock(lock, lock, 'holds ' .. kind_words(kind))
end
local bad = check_kinds(lock, 'zset', {shared, queue, expiry}) or
  check_kinds(lock, 'hash', {holders})
if bad then
  return bad
end
local last, bad_fence = last_fence(lock, fence_key)
if bad_fence then
  return bad_fence
end

local now_us, now_ms = server_now()
-- Shared holders whose lease ended are gone, and so are waiters that stopped asking.
local ended = redis.call('ZRANGEBYSCORE', shared, '-inf', now_ms, 'LIMIT', 0, 1000)
if #ended > 0 then
  redis.call('ZREM', shared, unpack(ended))
  redis.call('HDEL', holders, unpack(ended))
  -- And what release.lua noted of those kept by --hold-at-least.
  local kept = {}
  for i, ended_token in ipairs(ended) do
    kept[i] = ended_token .. ':kept'
  end
  redis.call('HDEL', holders, unpack(kept))
end
reap_waiters(queue, expiry, now_ms, 1)
-- Live leases that no --shared run took (somebody else's set) are neither joined nor
-- waited for.
if redis.call('EXISTS', shared) == 1 and not shared_ours(shared, holders) then
  return not_shared_holders(lock, shared, holders)
end

local function busy(free)
  local place = 0
  if waiter ~= '' then
    place = keep_place(queue, expiry, waiter, now_us, now_ms, keep)
  end
  -- The exclusive holder, and whether its command finished with --hold-at-least keeping
  -- the lock (release.lua notes it), as acquire.lua tells it.
  local host, pid, since, finished, kept_until = '', '', '', '', ''
  if value then
    local info = redis.pcall('HMGET', holder, 'token', 'host', 'pid', 'acquired_ms',
      'finished_ms', 'kept_until_ms')
    if type(info) == 'table' and not info.err and info[1] == value then
      host, pid, since = info[2] or '', info[3] or '', info[4] or ''
      finished, kept_until = info[5] or '', info[6] or ''
    end
  end
  local pttl = free and -2 or redis.call('PTTL', lock)
  local reply = {0, pttl, host, pid, since, redis.call('ZCARD', queue), place, finished,
    kept_until}
  -- A pause in force is told, whoever else keeps the lock (as acquire.lua does).
  local p = pause_in_force(pause)
  if p then
    reply[10], reply[11], reply[12] = p[1], p[2], p[3]
  end
  return reply
end

-- Our own token: an earlier attempt of this run landed although its reply was lost. It is
-- taken anew below, with a new fence and a fresh lease.
if not redis.call('ZSCORE', shared, token) then
  if kind == 'string' then
    return busy(false)
  end
  -- Paused: no new share (a waiter keeps its place until resume or the pause's end); the
  -- shares held go on, as a holder is never touched by a pause.
  if pause_in_force(pause) then
    return busy(true)
  end
  -- Every waiter before us (all of them for a run that is not queued yet) must be shared.
  local rank = waiter ~= '' and redis.call('ZRANK', queue, waiter) or nil
  if rank ~= 0 then
    local ahead = redis.call('ZRANGE', queue, 0, rank and rank - 1 or -1)
    for _, id in ipairs(ahead) do
      if string.sub(id, 1, 7) ~= 'shared:' then
        return busy(true)
      end
    end
  end
end

local fence_str, end_of_range = next_fence(fence_key, last, now_us)
if not fence_str then
  return end_of_range
end
-- The set and the holders' info live as long as the longest lease: the latest score, which
-- must be a lease end (a member added by something else may not be).
local latest = redis.call('ZRANGE', shared, -1, -1, 'WITHSCORES')[2]
latest = latest and tonumber(latest) or 0
if latest ~= latest or latest == math.huge or latest == -math.huge then
  return not_a_lock(lock, shared, 'holds a member whose score is no lease end')
end
local left = math.max(math.ceil(math.max(latest, now_ms + ttl) - now_ms), 1)
if waiter ~= '' then
  leave_queue(queue, expiry, waiter)
end
redis.call('ZADD', shared, string.format('%.0f', now_ms + ttl), token)
redis.call('SET', fence_key, fence_str, 'PX', ARGV[10])
-- As a --limit permit's info (semaphore/acquire.lua), the note after TAB US.
local info = ARGV[11] .. '\t' .. ARGV[12] .. '\t' .. string.format('%.0f', now_ms) .. '\t' ..
  fence_str .. '\t' .. ARGV[13]
if note ~= '' then
  info = info .. '\t\31' .. note
end
redis.call('HSET', holders, token, info)
redis.call('PEXPIRE', shared, left)
redis.call('PEXPIRE', holders, left)
return {1, fence_str}
