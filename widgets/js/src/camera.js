// The graph view's camera: world (layout px) -> canvas px as scale and offset. `ratio` is the
// whole graph's fit scale over the current one (1 = fit, < 1 zoomed in), like sigma's camera
// it replaces; state changes call `onChange` so the view redraws (one frame per change).
const MAX_SCALE = 4, MIN_SCALE_OF_FIT = 0.25;

export class Camera {
  constructor(onChange) {
    this.onChange = onChange;
    this.W = 600; this.H = 400;
    this.bounds = { x0: 0, y0: 0, x1: 1, y1: 1 };
    this.x = 0.5; this.y = 0.5; this.scale = 1;
    this.anim = null;
  }

  viewport(W, H) {
    if (W > 0 && H > 0 && (W !== this.W || H !== this.H)) { this.W = W; this.H = H; }
  }

  setBounds(b, W, H) { this.bounds = b; this.viewport(W, H); }

  scaleFor(b) {
    const bw = Math.max(1, b.x1 - b.x0), bh = Math.max(1, b.y1 - b.y0);
    return Math.min(MAX_SCALE, Math.min((this.W - 24) / bw, (this.H - 24) / bh));
  }

  get fitScale() { return this.scaleFor(this.bounds); }
  get ratio() { return this.fitScale / this.scale; }
  offsetX() { return this.W / 2 - this.x * this.scale; }
  offsetY() { return this.H / 2 - this.y * this.scale; }
  clampScale(s) { return Math.max(this.fitScale * MIN_SCALE_OF_FIT, Math.min(MAX_SCALE, s)); }

  getState() { return { x: this.x, y: this.y, scale: this.scale, ratio: this.ratio }; }

  setState(st) {
    this.anim = null;
    if (st.x !== undefined) this.x = st.x;
    if (st.y !== undefined) this.y = st.y;
    if (st.scale !== undefined) this.scale = this.clampScale(st.scale);
    else if (st.ratio !== undefined) this.scale = this.clampScale(this.fitScale / st.ratio);
    this.onChange();
  }

  animate(st, opts = {}) {
    const to = { x: st.x ?? this.x, y: st.y ?? this.y,
      scale: this.clampScale(st.scale ?? (st.ratio !== undefined ? this.fitScale / st.ratio : this.scale)) };
    this.anim = { from: { x: this.x, y: this.y, scale: this.scale }, to, t0: performance.now(),
      duration: opts.duration ?? 300 };
    this.onChange();
  }

  isAnimated() { return this.anim !== null; }

  step() {
    // advance a running animation to now (called once per frame)
    const a = this.anim;
    if (!a) return;
    const t = Math.min(1, (performance.now() - a.t0) / a.duration);
    const e = t < 0.5 ? 2 * t * t : 1 - Math.pow(-2 * t + 2, 2) / 2;
    const ls0 = Math.log(a.from.scale), ls1 = Math.log(a.to.scale);
    this.scale = Math.exp(ls0 + (ls1 - ls0) * e);
    this.x = a.from.x + (a.to.x - a.from.x) * e;
    this.y = a.from.y + (a.to.y - a.from.y) * e;
    if (t >= 1) this.anim = null;
  }

  fit(b, animate) {
    b = b || this.bounds;
    const st = { x: (b.x0 + b.x1) / 2, y: (b.y0 + b.y1) / 2, scale: this.scaleFor(b) };
    animate ? this.animate(st) : this.setState(st);
  }

  // the opening view: the whole graph when its text stays readable (>= minScale), else the
  // graph's top at a readable scale, as wide as fits (Netron opens tall graphs the same way)
  fitReadable(minScale) {
    const b = this.bounds;
    const s = this.scaleFor(b);
    if (s >= minScale) { this.fit(b, false); return; }
    const bw = Math.max(1, b.x1 - b.x0);
    const s1 = Math.max(minScale, Math.min(1, (this.W - 24) / bw));
    this.setState({ x: (b.x0 + b.x1) / 2, y: b.y0 - 12 / s1 + this.H / 2 / s1, scale: s1 });
  }

  animatedReset() { this.fit(null, true); }

  centerOn(x, y, animate) { animate ? this.animate({ x, y }) : this.setState({ x, y }); }

  panBy(dx, dy) { this.setState({ x: this.x - dx / this.scale, y: this.y - dy / this.scale }); }

  zoomAt(cx, cy, factor) {
    // keep the world point under (cx, cy) in place
    const s1 = this.clampScale(this.scale * factor);
    const wx = (cx - this.offsetX()) / this.scale, wy = (cy - this.offsetY()) / this.scale;
    this.setState({ scale: s1, x: wx - (cx - this.W / 2) / s1, y: wy - (cy - this.H / 2) / s1 });
  }
}
