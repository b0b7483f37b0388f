// Module resolution hooks (node:module `register`) for running hooks in Node: the host
// interface resolves to the stand-in host (./host.mjs), `colloquy-hook` to the kit.

const HOST = 'colloquy:hooks/host@1.0.0';
const hostUrl = new URL('./host.mjs', import.meta.url).href;
const kitUrl = new URL('../colloquy-hook.js', import.meta.url).href;

export async function resolve(specifier, context, nextResolve) {
  if (specifier === HOST) return { url: hostUrl, shortCircuit: true };
  if (specifier === 'colloquy-hook') return { url: kitUrl, shortCircuit: true };
  return nextResolve(specifier, context);
}
