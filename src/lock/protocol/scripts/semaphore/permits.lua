-- Prepended to the semaphore's renew.lua and release.lua, after reach.lua.

-- Every key of the semaphore lives as long as its longest lease (acquire.lua does the same
-- for a new permit). The limit is written again where it is missing if `creating` is '1'
-- (ScriptCall::creating: not on the node a migrating slot goes to, where the node it leaves
-- may still have it); else only extended. Keys out of reach (a migration) keep their own TTL.
local function keep_for_longest_lease(lock, holders, limit_key, limit, now_ms, creating)
  local longest = redis.call('ZRANGE', lock, -1, -1, 'WITHSCORES')
  -- A whole number of ms: a score need not be one.
  local left = math.max(math.ceil(tonumber(longest[2]) - now_ms), 1)
  redis.call('PEXPIRE', lock, left)
  if here(holders) then
    redis.call('PEXPIRE', holders, left)
  end
  if here(limit_key) then
    if creating == '1' then
      redis.call('SET', limit_key, limit, 'PX', left)
    else
      redis.call('SET', limit_key, limit, 'PX', left, 'XX')
    end
  end
end
