import { defineConfig } from 'vitest/config';

// Unit tests of the pure helpers and the cache updates (`npm run test:unit`), in Node.
// The browser tests in e2e/ run separately (`npm run test:e2e`).
export default defineConfig({
  test: {
    include: ['src/**/*.test.ts'],
    environment: 'node',
  },
});
