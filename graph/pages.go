package graph

import "github.com/talkgraph/talkgraph/graph/model"

// pageInfo is a connection's PageInfo: its start and end are the first and last of cursors.
func pageInfo(cursors []string, hasPrev, hasNext bool) *model.PageInfo {
	p := &model.PageInfo{HasNextPage: hasNext, HasPreviousPage: hasPrev}
	if n := len(cursors); n > 0 {
		p.StartCursor, p.EndCursor = &cursors[0], &cursors[n-1]
	}
	return p
}
