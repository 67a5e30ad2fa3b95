// Types of icons.js: tab icons as inline SVG.
/** The icon for an SF-Symbol-like name (an SVG), or the title's first letter. */
export function tabdIcon(name: string, title: string): Element;
/** The icon a name resolves to (`house.fill` → `house`), or null. */
export function iconKey(name: string): string | null;
