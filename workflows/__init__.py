"""NVTabular ETL: raw ratings -> model ids, leave-one-out split, exact evaluation negatives."""
