// Run in the browser on a driftlog report: per figure, how many of its data marks have a drawn size.
const out = [];
for (const section of document.querySelectorAll("section.figure")) {
  let drawn = 0;
  for (const mark of section.querySelectorAll(".mark")) {
    const box = mark.getBoundingClientRect();
    if (box.width > 0 || box.height > 0) drawn += 1;
  }
  const svg = section.querySelector("svg");
  const box = svg ? svg.getBoundingClientRect() : section.getBoundingClientRect();
  out.push({
    key: section.dataset.figure,
    expected: Number(section.dataset.marks),
    drawn: drawn,
    width: box.width,
    height: box.height,
    empty: section.querySelector(".empty") !== null,
  });
}
const nav = performance.getEntriesByType("navigation")[0];
return {
  figures: out,
  resources: performance.getEntriesByType("resource").map((r) => r.name),
  load_ms: nav.loadEventEnd,
  page_height: document.documentElement.scrollHeight,
};
