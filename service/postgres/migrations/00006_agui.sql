-- agui_threads binds a user's AG-UI thread IDs (the client's own names for its
-- conversations) to the sessions made for them (Store.BindThread). A binding may come
-- before its session's creation (the session is created once its ID is bound), so it has
-- no foreign key; deleting a session removes its bindings.

-- +goose Up
CREATE TABLE agui_threads (
	user_id    text NOT NULL,
	thread_id  text NOT NULL,
	session_id text NOT NULL,
	PRIMARY KEY (user_id, thread_id)
);
CREATE INDEX agui_threads_by_session ON agui_threads (session_id);

-- +goose Down
DROP TABLE agui_threads;
