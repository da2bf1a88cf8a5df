/// <reference types="vitest/config" />
import { defineConfig } from 'vite';
import react from '@vitejs/plugin-react';

// `npm run dev` serves the portal on :5173 and forwards the API to a modelplane on :8080
// (./scripts/run.sh); in production modelplane serves the built files itself.
const api = process.env.MODELPLANE_URL ?? 'http://127.0.0.1:8080';

export default defineConfig({
  plugins: [react()],
  server: {
    proxy: {
      '/api': api,
      '/graphql': { target: api, ws: true },
      '/healthz': api,
    },
  },
  build: {
    outDir: 'dist',
    // Hashed file names under /assets: modelplane serves them with a year-long cache.
    assetsDir: 'assets',
    sourcemap: false,
  },
  test: {
    environment: 'jsdom',
    setupFiles: ['./src/test/setup.ts'],
    include: ['src/**/*.test.{ts,tsx}'],
  },
});
