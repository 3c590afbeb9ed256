// Static output into the Python package, where `tidelake serve` finds it (package data).
import { defineConfig } from "astro/config";

export default defineConfig({
  output: "static",
  outDir: "../src/tidelake/api/static",
  build: { assets: "_astro" },
  devToolbar: { enabled: false },
});
