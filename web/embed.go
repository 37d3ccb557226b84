// Package web holds the talkgraph chat app, a TypeScript single-page app built with Vite.
//
// Dist is the production build (web/dist, committed), for the server to serve: the chat
// app (index.html) at "/" and the GraphQL playground (playground.html) at "/playground".
// Its root is "dist": use fs.Sub(web.Dist, "dist") to serve them and assets/.
// Rebuild it with `npm ci && npm run build` in web/ after changing the app or the schema.
package web

import "embed"

// Dist is the built app: dist/index.html, dist/playground.html and dist/assets/*.
//
//go:embed all:dist
var Dist embed.FS
