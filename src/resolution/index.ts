/** Resolution records arrive with the resolution issue; this module is its home. */
export {};
