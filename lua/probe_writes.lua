#!lua
-- Writes nothing, and is refused all the same while Redis takes no writes: a flagged script that
-- may write (no `no-writes` flag) is checked before it runs, and refused with the reason a
-- write would meet (OOM out of memory under noeviction, READONLY a replica, MISCONF a failed
-- snapshot with stop-writes-on-bgsave-error, NOREPLICAS too few replicas for
-- min-replicas-to-write). `status` calls it to say so, without writing anything.
--
-- KEYS[1] hold  string  never read: a key of the namespace, so that a cluster routes the call to
--                       the server holding the namespace's slot
--
-- Returns 1.
-- Cost: O(1).
return 1
