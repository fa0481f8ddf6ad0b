-- `break`: take the lock away from the holder named by its token, in one atomic step, and
-- only from that holder: a lock (or permit, or share) that holds another token is left alone.
-- Works on every layout, so that `break` needs neither --limit nor --shared: the mutex's
-- string key, one permit of the --limit semaphore's sorted set, or one shared holder of the
-- --shared set beside a free lock key (shared/acquire.lua: an exclusive holder and shared
-- ones never hold the lock together).
-- KEYS: lock. ARGV: holder hash, holders hash (--limit), fence counter, release channel,
-- queue, queue expiry, broken marks, last-run, last-success (left alone: a broken run is no
-- success); then token, breaker's host,
-- how long the broken mark is kept (ms), fence counter ttl (ms), record retention (ms); then
-- the holds key and the hold records' retention (ms); then the --shared holders' set.
-- In the same step:
-- - the fence is raised: the counter is set to a new fence F (as an acquire would), so that
--   the next grant's fence is above F and above every fence before it;
-- - a broken mark for the token (who broke it, when, on the server's clock), which the
--   holder's next renewal reads (renew.lua);
-- - the run record's last run, outcome 'broken', for the holder that lost it (record.rs);
-- - the token's hold record (a hold across CI steps, hold.lua), if it is `held` or
--   `releasing`: it ends `lost`, with who broke it (`broken_by`) and when (`ended_ms`), so
--   that `release` says so whether or not the keeper renewed since;
-- - the release is announced, waking the queue's head; for a shared holder only when it
--   was the last one, as shared/release.lua does (only then can an exclusive waiter go in).
-- Returns {1, F} when broken; {0} when the lock holds another token (or the permit or share
-- is not among the live ones); {-1} when the lock is free; TRYAGAIN (reach.lua) when a key
-- it needs is out of reach (a migration of the slot).
local lock = KEYS[1]
local holder, holders, fence_key, channel = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local queue, expiry, broken = ARGV[5], ARGV[6], ARGV[7]
local last_run = ARGV[8]
local token, by, broken_keep, fence_keep, record_keep = ARGV[10], ARGV[11], ARGV[12],
  ARGV[13], ARGV[14]
local holds, hold_keep = ARGV[15], tonumber(ARGV[16])
local shared = ARGV[17]

local kind = type_here(lock)
if not kind then
  return split()
end
-- A free lock key: held --shared, or free.
if kind == 'none' then
  local shared_kind = type_here(shared)
  if not shared_kind then
    return split()
  end
  if shared_kind == 'none' then
    return {-1}
  end
  if shared_kind ~= 'zset' then
    return not_a_lock(lock, shared, 'holds ' .. kind_words(shared_kind) ..
      ', where redlock-run keeps a sorted set')
  end
end
-- Every write below needs its key in reach: check all before the first one.
for _, key in ipairs({fence_key, broken, last_run, holds}) do
  if not here(key) then
    return split()
  end
end
local last, bad_fence = last_fence(lock, fence_key)
if bad_fence then
  return bad_fence
end
local now_us, now_ms = server_now()

-- What is known of the run: host, pid, command, acquired (ms), fence.
local host, pid, cmd, since, fence
-- A holder whose command already finished (kept by --hold-at-least) released with its run
-- record written: breaking it takes the lock, and leaves that record as it is.
local finished = false
-- A permit's or a shared holder's info (semaphore/acquire.lua, shared/acquire.lua):
-- `host TAB pid TAB acquired_ms TAB fence TAB command [TAB US note]`, beside `TOKEN:kept`
-- once its command finished.
local function member_info()
  if here(holders) and type_here(holders) == 'hash' then
    local info = redis.call('HGET', holders, token)
    finished = redis.call('HEXISTS', holders, token .. ':kept') == 1
    if info then
      host, pid, since, fence, cmd = string.match(info,
        '^([^\t]*)\t([^\t]*)\t([^\t]*)\t([^\t]*)\t(.*)$')
      -- Without the note.
      cmd = cmd and (string.match(cmd, '^(.-)\t\31') or cmd)
    end
  end
end
-- The shared holder being broken was the last one with a lease (shared/lease.lua): its
-- release would announce it.
local last_share = false
if kind == 'string' then
  if redis.call('GET', lock) ~= token then
    return {0}
  end
  if here(holder) and type_here(holder) == 'hash' then
    local info = redis.call('HMGET', holder, 'token', 'host', 'pid', 'cmd', 'acquired_ms', 'fence',
      'finished_ms')
    if info[1] == token then
      host, pid, cmd, since, fence = info[2], info[3], info[4], info[5], info[6]
      finished = info[7] ~= nil and info[7] ~= false
    end
  end
elseif kind == 'zset' then
  local score = redis.call('ZSCORE', lock, token)
  if not score or tonumber(score) <= now_ms then
    return {0}
  end
  member_info()
elseif kind == 'none' then
  local score = redis.call('ZSCORE', shared, token)
  if not score or tonumber(score) <= now_ms then
    -- Another shared holder's lease lasts: held by another; else nobody holds it now.
    if others_hold(shared, token, now_ms) then
      return {0}
    end
    return {-1}
  end
  member_info()
  last_share = not others_hold(shared, token, now_ms)
else
  return not_a_lock(lock, lock, 'holds ' .. kind_words(kind))
end

local fence_str, end_of_range = next_fence(fence_key, last, now_us)
if not fence_str then
  return end_of_range
end

-- The lock (or permit, or share) goes.
if kind == 'string' then
  redis.call('DEL', lock)
  if here(holder) then
    redis.call('DEL', holder)
  end
elseif kind == 'none' then
  redis.call('ZREM', shared, token)
  if here(holders) then
    redis.call('HDEL', holders, token, token .. ':kept')
  end
else
  redis.call('ZREM', lock, token)
  if here(holders) then
    redis.call('HDEL', holders, token, token .. ':kept')
  end
end
redis.call('SET', fence_key, fence_str, 'PX', fence_keep)

-- The broken mark: one field per token, all kept for broken_keep after the latest break.
local bad_mark = check_kinds(lock, 'hash', {broken})
if not bad_mark then
  redis.call('HSET', broken, token, by .. '\t' .. string.format('%.0f', now_ms))
  redis.call('PEXPIRE', broken, broken_keep)
end

-- The run record, for the holder that lost the lock (best effort, as record.lua: a key of
-- another type is left as it is).
if not finished and (type_here(last_run) == 'hash' or type_here(last_run) == 'none') then
  local started = tonumber(since or '') or now_ms
  redis.call('HSET', last_run,
    'host', host or '', 'pid', pid or '', 'program', cmd or '', 'fence', fence or '',
    'started_ms', string.format('%.0f', math.min(started, now_ms)),
    'ended_ms', string.format('%.0f', now_ms),
    'outcome', 'broken', 'exit_code', '', 'signal', '', 'broken_by', by)
  redis.call('PEXPIRE', last_run, record_keep)
end

-- The hold record (best effort, as the run record: a key of another type is left as it is).
if type_here(holds) == 'hash' then
  local stored = redis.call('HGET', holds, token)
  local ok, hold = false, nil
  if stored then
    ok, hold = pcall(cjson.decode, stored)
  end
  if ok and type(hold) == 'table' and (hold.state == 'held' or hold.state == 'releasing') then
    hold.state = 'lost'
    hold.reason = 'the lock was broken by ' .. by .. ' (redlock-run break)'
    hold.broken_by = by
    hold.ended_ms = string.format('%.0f', now_ms)
    redis.call('HSET', holds, token, cjson.encode(hold))
    if redis.call('PTTL', holds) < hold_keep then
      redis.call('PEXPIRE', holds, hold_keep)
    end
  end
end

-- Wake the waiters now (pcall: an ACL user without channel access still breaks).
if kind == 'string' or last_share then
  redis.pcall('PUBLISH', channel, whom_to_wake(queue, expiry))
elseif kind == 'zset' then
  redis.pcall('PUBLISH', channel, '1')
end
return {1, fence_str}
