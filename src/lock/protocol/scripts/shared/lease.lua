-- Prepended to the shared hold's renew.lua and release.lua, and to break.lua, after reach.lua.

-- The set of shared holders and their info live as long as the longest lease (acquire.lua
-- does the same for a new holder). Keys out of reach (a migration) keep their own TTL.
local function keep_for_longest_lease(shared, holders, now_ms)
  local longest = redis.call('ZRANGE', shared, -1, -1, 'WITHSCORES')
  -- A whole number of ms: a score need not be one.
  local left = math.max(math.ceil(tonumber(longest[2]) - now_ms), 1)
  redis.call('PEXPIRE', shared, left)
  if here(holders) then
    redis.call('PEXPIRE', holders, left)
  end
end

-- Whether a shared holder other than `token` still has a lease: while one has, an exclusive
-- waiter cannot go in, and a release need not wake it.
local function others_hold(shared, token, now_ms)
  for _, member in ipairs(redis.call('ZRANGEBYSCORE', shared, '(' .. now_ms, '+inf', 'LIMIT', 0, 2)) do
    if member ~= token then
      return true
    end
  end
  return false
end
