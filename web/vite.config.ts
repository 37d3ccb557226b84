import react from '@vitejs/plugin-react';
import { fileURLToPath } from 'node:url';
import { defineConfig } from 'vite';

// The build goes to dist/, which web/embed.go embeds into the Go server binary: the chat
// app (index.html, served at /) and the GraphQL playground (playground.html, served at
// /playground), with their assets and the playground's editor workers under assets/.
// `npm run dev` proxies the API to a server on TALKGRAPH_URL (default localhost:8080).
const api = process.env.TALKGRAPH_URL ?? 'http://localhost:8080';

export default defineConfig({
  plugins: [react()],
  base: './',
  build: {
    outDir: 'dist',
    emptyOutDir: true,
    sourcemap: false,
    // The playground's editor (Monaco, through GraphiQL) is big; the chat app does not load it.
    chunkSizeWarningLimit: 5000,
    rollupOptions: {
      input: {
        index: fileURLToPath(new URL('./index.html', import.meta.url)),
        playground: fileURLToPath(new URL('./playground.html', import.meta.url)),
      },
      // GraphiQL's modules start with "use no memo" (for the React compiler), which a bundle
      // cannot keep; that is harmless, and said once per module.
      onwarn(warning, warn) {
        if (warning.code !== 'MODULE_LEVEL_DIRECTIVE') warn(warning);
      },
    },
  },
  worker: { format: 'es' },
  server: {
    proxy: {
      '/query': {
        target: api,
        ws: true,
        changeOrigin: true,
        // The server refuses websockets from other origins: present the page as its own.
        configure: (proxy) => {
          proxy.on('proxyReqWs', (req) => req.setHeader('origin', api));
        },
      },
      '/auth': { target: api },
    },
  },
});
