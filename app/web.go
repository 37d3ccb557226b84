package app

import (
	"io/fs"

	"github.com/talkgraph/talkgraph/web"
)

// webFiles returns the embedded browser app, served at /.
func webFiles() fs.FS {
	dist, err := fs.Sub(web.Dist, "dist")
	if err != nil {
		panic(err) // the embed pattern guarantees the folder
	}
	return dist
}
