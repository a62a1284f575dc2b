// The studio's application (placeholder until the frontend lands).
import { draw } from "./graph.js";

export { draw };
