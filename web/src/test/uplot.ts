// uPlot draws on a <canvas>, which jsdom does not have: the component tests replace it with
// this stand-in (set up for every test in setup.ts), which keeps what the chart was given so
// a test can read the options (labels, dash patterns, axis units) and the data (gaps too).
import type uPlot from 'uplot';

export const plots: FakePlot[] = [];

export class FakePlot {
  options: uPlot.Options;
  data: uPlot.AlignedData;
  target: HTMLElement;
  destroyed = false;
  cursor: { idx: number | null } = { idx: null };
  constructor(options: uPlot.Options, data: uPlot.AlignedData, target: HTMLElement) {
    this.options = options;
    this.data = data;
    this.target = target;
    plots.push(this);
  }
  setData(data: uPlot.AlignedData) {
    this.data = data;
  }
  setSize() {}
  redraws = 0;
  redraw() {
    this.redraws += 1;
  }
  destroy() {
    this.destroyed = true;
  }
  /** The plots still on the page. */
  static live(): FakePlot[] {
    return plots.filter((p) => !p.destroyed);
  }
}
