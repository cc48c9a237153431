"""What the browser tests measure of a page's layout (in the page, by script): the charts'
time labels, a phone's window, the cards' empty bands."""

PHONE = {"width": 390, "height": 844}

# The charts' time labels (elements under each plot, static/console.js): per chart, the
# labels' texts and what is wrong with them (touching, repeated, outside their chart).
TIME_LABELS = """() => [...document.querySelectorAll('.chart-ticks')].map(row => {
    const spans = [...row.children].map(
        s => ({text: s.textContent, box: s.getBoundingClientRect()}));
    const wrong = [];
    spans.forEach((s, i) => {
        const before = spans[i - 1];
        if (before && s.box.left < before.box.right + 2) {
            wrong.push('overlap: ' + before.text + ' | ' + s.text);
        }
    });
    const texts = spans.map(s => s.text);
    if (new Set(texts).size !== texts.length) wrong.push('repeated: ' + texts.join(', '));
    const plot = row.closest('.chart-plot').getBoundingClientRect();
    spans.forEach(s => {
        if (s.box.left < plot.left - 0.5 || s.box.right > plot.right + 0.5) {
            wrong.push('outside: ' + s.text);
        }
    });
    return {texts, wrong};
})"""

# At a phone's width: the page's own width, whether each link of the navigation is on
# screen with nothing over it, and the form controls that stick out of the window (outside
# a box that scrolls sideways of its own, such as a table's).
PHONE_LAYOUT = """() => {
    window.scrollTo(0, 0);
    const width = window.innerWidth;
    const links = [...document.querySelectorAll('.topbar nav a')].map(a => {
        const box = a.getBoundingClientRect();
        const x = box.left + box.width / 2, y = box.top + box.height / 2;
        const hit = document.elementFromPoint(x, y);
        const shown = box.width > 0 && box.left >= 0 && box.right <= width
            && box.bottom <= window.innerHeight;
        return {text: a.textContent.trim(), reachable: shown && !!hit && a.contains(hit)};
    });
    const scrolls = el => {
        for (let p = el.parentElement; p; p = p.parentElement) {
            if (['auto', 'scroll'].includes(getComputedStyle(p).overflowX)) return true;
        }
        return false;
    };
    const sticking = [...document.querySelectorAll('select, input, textarea, button')]
        .filter(e => e.getClientRects().length && !scrolls(e))
        .filter(e => e.getBoundingClientRect().right > width + 0.5)
        .map(e => e.outerHTML.slice(0, 80));
    return {page: document.documentElement.scrollWidth, links, sticking};
}"""

# Cards with an empty band: space beyond the card's padding above its first child, or below
# its last one where the card is not stretched to its row's height (a grid's, a flex row's).
CARD_BANDS = """() => [...document.querySelectorAll('.card')]
    .filter(card => card.getClientRects().length)
    .map(card => {
        const kids = [...card.children].filter(
            k => k.getClientRects().length && getComputedStyle(k).position !== 'absolute');
        if (!kids.length) return null;
        const style = getComputedStyle(card), box = card.getBoundingClientRect();
        const inner = box.top + parseFloat(style.borderTopWidth) + parseFloat(style.paddingTop);
        const top = kids[0].getBoundingClientRect().top - inner;
        const parent = getComputedStyle(card.parentElement).display;
        const stretched = parent.includes('grid') || parent.includes('flex');
        const end = box.bottom - parseFloat(style.borderBottomWidth)
            - parseFloat(style.paddingBottom);
        const bottom = stretched ? 0 : end - kids[kids.length - 1].getBoundingClientRect().bottom;
        if (top <= 2 && bottom <= 2) return null;
        return `${card.tagName}.${card.className}: ${Math.round(top)}px above, `
            + `${Math.round(bottom)}px below`;
    })
    .filter(Boolean)"""


def time_labels(page) -> list[list[str]]:
    """Every chart's time labels as drawn, checked: none touches or repeats another, none
    sticks out of its chart."""
    rows = page.evaluate(TIME_LABELS)
    wrong = [w for row in rows for w in row["wrong"]]
    assert not wrong, wrong
    return [row["texts"] for row in rows]


def wait_for_charts_width(page) -> None:
    """Until every chart is drawn at its box's width (they follow a resize)."""
    page.wait_for_function(
        "() => [...document.querySelectorAll('.chart-plot')].every(h => !h.uplot"
        " || Math.abs(h.uplot.width - Math.max(h.clientWidth, 240)) < 1)"
    )
