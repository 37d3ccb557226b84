import react from '@vitejs/plugin-react';
import { defineConfig } from 'vite';

// The build goes to dist/, which web/embed.go embeds into the Go server binary.
// `npm run dev` proxies the API to a server on TALKGRAPH_URL (default localhost:8080).
const api = process.env.TALKGRAPH_URL ?? 'http://localhost:8080';

export default defineConfig({
  plugins: [react()],
  base: './',
  build: {
    outDir: 'dist',
    emptyOutDir: true,
    sourcemap: false,
    chunkSizeWarningLimit: 800,
  },
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
