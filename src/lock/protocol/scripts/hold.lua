-- A hold across CI steps (`acquire` ... `release`, protocol/hold.rs): its record, one field
-- of the `holds` hash per token, a JSON object: state, host, pid, id, fence, limit, since_ms,
-- until_ms (the --max-hold deadline), ended_ms, reason (times on the server's clock).
-- KEYS: holds. ARGV: lock, op, token, retention ms, then the op's own:
--   begin  max-hold ms, host, pid, id, fence, --limit: write the record, only while the lock holds the
--          token (the mutex's string or a --limit holder); nil if it does not.
--   end    state, reason, states it may end from (space-separated): the hold ends (released,
--          lost, max-hold) if its record is in one of those states; nil if there is none.
-- begin also drops records whose retention has passed (ended, or past their --max-hold, more
-- than the retention ago).
-- Returns the record as it stands after the call (JSON); TRYAGAIN (reach.lua) if this node
-- cannot reach the keys (a migration of the lock's slot).
local holds, lock, op, token, retention = KEYS[1], ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[4])
if not here(holds) then
  return split()
end

local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- Times as decimal strings: cjson would write a large number in exponent form.
local function ms(n)
  return string.format('%.0f', n)
end

-- The hash lives as long as its longest-lived record needs: never shortened.
local function keep_for(ms)
  local left = redis.call('PTTL', holds)
  if left < ms then
    redis.call('PEXPIRE', holds, ms)
  end
end

if op == 'begin' then
  local kind = type_here(lock)
  if not kind then
    return split()
  end
  local ours = false
  if kind == 'string' then
    ours = redis.call('GET', lock) == token
  elseif kind == 'zset' then
    ours = redis.call('ZSCORE', lock, token) ~= false
  end
  if not ours then
    return false
  end
  local max_hold = tonumber(ARGV[5])
  local since = now_ms()
  -- Records past their retention go first: the hash lives as long as its newest hold, so
  -- without this it would only ever grow on a lock taken again and again.
  local fields = redis.call('HGETALL', holds)
  for i = 1, #fields, 2 do
    local ok, old = pcall(cjson.decode, fields[i + 1])
    local ended = ok and type(old) == 'table' and tonumber(old.ended_ms) or 0
    local bound = ok and type(old) == 'table' and tonumber(old.until_ms) or 0
    local last = math.max(ended or 0, bound or 0)
    if last + retention < since then
      redis.call('HDEL', holds, fields[i])
    end
  end
  local record = cjson.encode({
    state = 'held', host = ARGV[6], pid = tonumber(ARGV[7]), id = ARGV[8],
    fence = ARGV[9], limit = tonumber(ARGV[10]), since_ms = ms(since), until_ms = ms(since + max_hold), ended_ms = '0',
    reason = ''
  })
  redis.call('HSET', holds, token, record)
  keep_for(max_hold + retention)
  return record
end

local stored = redis.call('HGET', holds, token)
if not stored then
  return false
end
if op == 'end' then
  -- A record this script did not write (not JSON, or without its fields) is left as it is
  -- and returned: the caller refuses it as an unexpected reply, never a Lua error.
  local ok, record = pcall(cjson.decode, stored)
  if not ok or type(record) ~= 'table' or type(record.state) ~= 'string'
      or record.fence == nil or record.since_ms == nil or record.until_ms == nil then
    return stored
  end
  for from in string.gmatch(ARGV[7], '%S+') do
    if record.state == from then
      record.state = ARGV[5]
      record.reason = ARGV[6]
      record.ended_ms = ms(now_ms())
      stored = cjson.encode(record)
      redis.call('HSET', holds, token, stored)
      keep_for(retention)
      break
    end
  end
end
return stored
