import '@testing-library/jest-dom/vitest';
import { cleanup } from '@testing-library/react';
import { afterEach, vi } from 'vitest';
import { plots } from './uplot';

afterEach(() => {
  cleanup();
  sessionStorage.clear();
});

// jsdom has <dialog> but not its modal methods; the browser tests cover the real ones.
if (typeof HTMLDialogElement !== 'undefined' && !HTMLDialogElement.prototype.showModal) {
  HTMLDialogElement.prototype.showModal = function showModal(this: HTMLDialogElement) {
    this.setAttribute('open', '');
  };
  HTMLDialogElement.prototype.close = function close(this: HTMLDialogElement) {
    this.removeAttribute('open');
  };
}

// uPlot needs a canvas, which jsdom has not: every test gets the stand-in of ./uplot.ts.
vi.mock('uplot', async () => ({ default: (await import('./uplot')).FakePlot }));
afterEach(() => {
  plots.length = 0;
});
