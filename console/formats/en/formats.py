"""Dates and times everywhere (admin included): 24-hour, ISO order, in UTC (TIME_ZONE), the
way the console's own pages write them; not English's "Dec. 1, 2026, 8:30 p.m."."""

DATE_FORMAT = "Y-m-d"
TIME_FORMAT = "H:i"
DATETIME_FORMAT = "Y-m-d H:i:s T"
SHORT_DATE_FORMAT = "Y-m-d"
SHORT_DATETIME_FORMAT = "Y-m-d H:i"
MONTH_DAY_FORMAT = "F j"
YEAR_MONTH_FORMAT = "F Y"
