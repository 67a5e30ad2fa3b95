// Types of colors.js: readable shades of a tab's colour.
export type RGB = [number, number, number];
export function rgbOf(hex: string): RGB;
export function luminance(rgb: RGB): number;
export function contrast(a: RGB, b: RGB): number;
export function mix(a: RGB, b: RGB, t: number): RGB;
export function inkFor(color: RGB, under: RGB): RGB;
export function fillFor(color: RGB): RGB;
export function css(rgb: RGB, alpha?: number): string;
