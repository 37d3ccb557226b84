-- bus_seen holds the IDs of the commands replicas took from the bus (service.ReplayGuard),
-- each until (nanoseconds) no replica could take it as fresh any more, so that a command
-- captured on NATS and sent again is refused, even by a replica that restarted since. Rows
-- past their time are deleted now and then (Store.FirstSeen).

-- +goose Up
CREATE TABLE bus_seen (
	id    bytea PRIMARY KEY,
	until bigint NOT NULL
);

-- +goose Down
DROP TABLE bus_seen;
