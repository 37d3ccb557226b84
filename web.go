package main

import "io/fs"

// webFiles returns the embedded browser app, or nil while there is none.
func webFiles() fs.FS { return nil }
