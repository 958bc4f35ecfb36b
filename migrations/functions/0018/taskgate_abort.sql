-- Raises its message (SQLSTATE P0001): a statement that finds it must not go on (the budget
-- fast path when a chain's leases paid only in part) aborts and writes nothing. Since 0010.
CREATE OR REPLACE FUNCTION taskgate_abort(message text) RETURNS boolean LANGUAGE plpgsql VOLATILE AS $fn$
BEGIN
    RAISE EXCEPTION '%', message;
END
$fn$;
