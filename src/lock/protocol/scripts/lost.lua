-- Prepended to the renew scripts (mutex, --limit, --shared), after reach.lua.

-- The reply for a token that no longer holds the lock: 0, or {0, 'host TAB ms'} when a
-- `break` took it (break.lua left a mark for it), so that the holder can say who and when.
local function lost(broken, token)
  if broken and broken ~= '' and here(broken) and type_here(broken) == 'hash' then
    local mark = redis.call('HGET', broken, token)
    if mark then
      return {0, mark}
    end
  end
  return 0
end
