// The SVG drawing of a graph (placeholder until the frontend lands).
export function draw() {}
