-- release_check: the release's check before the request record
-- (core/script.rs, "A check before the record"), as the plain lock's
-- (lock/scripts/release_check.lua).
--
-- KEYS[1]  the lock hash
-- ARGV[2]  owner field
-- ARGV[3]  how many holds to give back
-- ARGV[8]  the hold count the client expects the field to have before
--          this release, or 0 to read and write the record as always (a
--          call of this client has an unknown outcome: core/conn.rs,
--          `records_optional`)
--
-- With the client's count known:
--
-- * The field holds exactly that count: this is the request's first run.
--   Nothing is read or written beside the lock: a copy of it finds the
--   field lowered or gone.
-- * The field holds that count less the holds given back: a copy of this
--   request already ran and left holds. Answered from the state, as a
--   replay: {1, left}. Nothing changes.
-- * The field is gone, and the release would have left none: {3}, "gone".
--   Either a copy of this request already freed the lock (and perhaps
--   granted it to the head waiter), or the hold was lost before the
--   request ran; Redis keeps nothing that tells the two apart. Nothing
--   changes. The client reads it as freed if the request may have been
--   sent more than once (core/call.rs, `Reply::may_be_copy`), as not held
--   otherwise.
-- * The field is gone and holds would have been left: {0}, not held (lost
--   before, or after a copy ran: either way none is held). Nothing
--   changes.
-- * Any other count (the client's count is out of date): the record is
--   read and written as always.
--
-- # Why a copy is harmless without the record
--
-- The proof rests on who can change this owner's field: its own requests,
-- one at a time under the owner's turn, and the field's end (expiry, a
-- force-unlock, a DEL from outside). No script sets a held field: a grant
-- (queue.lua, `grant`) writes `1` into the field of a queued waiter of a
-- free lock, and a field that holds the lock is never queued (its
-- re-entry drops any entry; a try of the owner queues it only when the
-- field is missing, and that refused try ends the holds the client
-- counted: core/lease.rs, `busy_seen`, so no release with a count is sent
-- for them); a leave gives a grant back only while its client counts no
-- hold of the field (ARGV[4] of leave.lua), which a release's client
-- does. And a copy of a request reaches Redis only while its call is in
-- progress (core/fence.rs), so under the same turn. So between the first
-- run and a copy nothing of this owner's but the first run touches the
-- field, and:
--
-- * A first run that freed the lock (DEL of the lock; with a queue, a
--   grant of it to the head waiter, which now holds `1` in its own field,
--   its entry replaced by the `!granted` marker, its message published).
--   A copy finds this owner's field gone, whatever happened since (the
--   grantee holds it, released it, another client took it): it answers
--   {3} and changes nothing. It never hands the lock over: no second
--   grant, no second message, and no hold taken after the first run is
--   freed (the copy deletes nothing). The reply of the first run, which
--   named the granted waiter and how many connections heard it, is lost
--   with that run's reply: see below.
-- * A first run that left holds (HSET of count less what it gave back,
--   PEXPIRE, the caller's `!granted` marker dropped). A copy finds the
--   field at that count and answers {1, left} from it: it gives back no
--   other hold. It cannot find the field back at the expected count: only
--   a re-entry of this owner raises it, and that waits for the turn this
--   call holds.
-- * The field lost before the first run (expired; freed by force): the
--   first run itself answers {3} or {0} and changes nothing. (Read with
--   the record, such a release handed a free lock to the head waiter, as
--   Redisson's unlock tells the head; that is a courtesy, not a duty: the
--   head's own sleep is bounded by the TTL it last saw, and a kick or any
--   script that finds the lock free hands it over.)
--
-- What the client does not get from {3}: the granted waiter's field (the
-- reply's text) and how many connections heard the grant. It then hands
-- no message over in this process (fair_lock/kind.rs, `hand_grant_here`):
-- Redis's message, published by the first run, tells the waiter, as it
-- tells one in another process; and it schedules no kick (queue.rs): a
-- granted waiter that was not listening holds the lock for at most the
-- grant's lease, and the waiters behind it re-check at their own bounds.
--
-- Sets `count` (the field's value, or false) for the body.
local count = redis.call('hget', KEYS[1], ARGV[2])
local early, early_replay = nil, false
local read_record, write_record = true, true
local expected = tonumber(ARGV[8])
if expected ~= 0 then
    local left = expected - tonumber(ARGV[3])
    if not count then
        if left > 0 then
            early = {0}
        else
            early = {3}
        end
    elseif tonumber(count) == expected then
        read_record, write_record = false, false
    elseif left > 0 and tonumber(count) == left then
        early, early_replay = {1, left}, true
    end
end
