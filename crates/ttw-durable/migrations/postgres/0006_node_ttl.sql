-- Each node records the lease TTL it runs with, so that an operator's tool
-- can say when the leases of a node that stops heartbeating run out (its
-- last heartbeat plus this). NULL for nodes of earlier versions.
ALTER TABLE ttw_nodes ADD COLUMN lease_ttl_ms BIGINT;
